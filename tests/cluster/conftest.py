"""Fixtures for the `cluster` tier: one real control plane per run, a fresh namespace per test.

If KUBECONFIG is set, tests run against that cluster and nothing is started or
stopped. Otherwise the local control plane (deploy.devcluster) is used: reused
if already running (`make cluster-up`, or another test session), else started
from an empty etcd and stopped when the last session using it ends. A cluster
that cannot be built or started FAILS the tests with the reason; it is never
skipped.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from deploy.devcluster import build, launcher
from deploy.devcluster.config import load_settings
from deploy.devcluster.nodes import create_fake_gpu_nodes, delete_fake_nodes

_build_error: str | None = None


@dataclass(frozen=True)
class KubeCluster:
    """What a cluster test gets: where the kubeconfig is and a client built from it."""

    kubeconfig: Path
    api_client: client.ApiClient
    started_here: bool

    @property
    def kubectl(self) -> list[str]:
        """argv prefix for the kubectl built with the cluster, bound to this kubeconfig."""
        return [str(load_settings().kubectl), f"--kubeconfig={self.kubeconfig}"]


def _uses_local_cluster(items: list[pytest.Item]) -> bool:
    wants_cluster = any(item.get_closest_marker("cluster") for item in items)
    return wants_cluster and not os.environ.get("KUBECONFIG")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the binaries before any test runs, outside the per-test timeout.

    A cold build takes far longer than pytest-timeout allows one test; doing it
    here keeps the timeout meaningful for the tests themselves. A failure is
    remembered and reported by `kube_cluster`, so every cluster test fails
    with the build's own message.
    """
    global _build_error  # noqa: PLW0603 - one build per session, shared with the fixture
    if session.config.option.collectonly or not _uses_local_cluster(session.items):
        return
    settings = load_settings()
    if build.is_built(settings):
        return
    # Show the build's progress live: a silent half hour looks like a hang in CI.
    capture = session.config.pluginmanager.getplugin("capturemanager")
    try:
        with capture.global_and_fixture_disabled():
            build.build(settings)
    except build.BuildError as exc:
        _build_error = str(exc)


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[KubeCluster]:
    """The cluster under test (session-wide); see the module docstring for which one."""
    external = os.environ.get("KUBECONFIG")
    if external:
        path = Path(external.split(os.pathsep)[0])
        yield KubeCluster(path, config.new_client_from_config(str(path)), started_here=False)
        return
    if _build_error:
        pytest.fail(f"cannot build the local control plane:\n{_build_error}", pytrace=False)
    settings = load_settings()
    try:
        started_here = launcher.acquire(settings)
    except (launcher.StartError, build.BuildError, OSError) as exc:
        pytest.fail(f"cannot start the local control plane:\n{exc}", pytrace=False)
    api = config.new_client_from_config(str(settings.kubeconfig))
    try:
        yield KubeCluster(settings.kubeconfig, api, started_here)
    finally:
        api.close()
        # Stops the cluster only if a test session started it and no other
        # session on this machine still uses it.
        launcher.release(settings)


def _namespace_name(test_name: str) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:40].strip("-")
    return f"{base}-{secrets.token_hex(3)}"


def wait_for_default_service_account(api: client.ApiClient, name: str, timeout: float = 30) -> None:
    """Pods are refused until kube-controller-manager creates the namespace's SA."""
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    while True:
        try:
            core.read_namespaced_service_account("default", name)
            return
        except ApiException as exc:
            if exc.status != 404:
                raise
        if time.monotonic() > deadline:
            pytest.fail(
                f"namespace {name}: ServiceAccount 'default' not created after {timeout:.0f}s; "
                "is kube-controller-manager running? see .state/cluster/logs/",
                pytrace=False,
            )
        time.sleep(0.2)


@pytest.fixture
def make_namespace(
    kube_cluster: KubeCluster, request: pytest.FixtureRequest
) -> Iterator[Callable[..., str]]:
    """Factory: `make_namespace(labels={...})` creates a fresh namespace, deleted afterwards."""
    core = client.CoreV1Api(kube_cluster.api_client)
    created: list[str] = []

    def _make(labels: dict[str, str] | None = None) -> str:
        name = _namespace_name(request.node.name)
        body = {"metadata": {"name": name, "labels": labels or {}}}
        core.create_namespace(body)
        created.append(name)
        wait_for_default_service_account(kube_cluster.api_client, name)
        return name

    yield _make
    for name in created:
        # Deletion finishes in the background: tests never wait on finalizers.
        try:
            core.delete_namespace(name, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture
def namespace(make_namespace: Callable[..., str]) -> str:
    """A fresh, unlabelled namespace for this test, deleted afterwards without waiting."""
    return make_namespace()


@pytest.fixture
def fake_gpu_nodes(kube_cluster: KubeCluster) -> Iterator[Callable[..., list[str]]]:
    """Factory: `fake_gpu_nodes(count, gpu_model)` makes Ready kwok nodes, deleted afterwards."""
    created: list[str] = []

    def _make(count: int = 1, gpu_model: str = "Tesla V100-PCIE-32GB") -> list[str]:
        prefix = f"kwok-gpu-{secrets.token_hex(3)}"
        names = create_fake_gpu_nodes(kube_cluster.api_client, count, gpu_model, prefix)
        created.extend(names)
        return names

    yield _make
    delete_fake_nodes(kube_cluster.api_client, created)
