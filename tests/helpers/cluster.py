"""The control plane for every tier that needs it (cluster tests, and browser tests that mint
tokens there): one real control plane per run, built before the first test.

If KUBECONFIG is set, tests run against that cluster and nothing is started or stopped. Otherwise
the local control plane (deploy.devcluster) is used: reused if already running (`make
cluster-up`, or another test session), else started from an empty etcd and stopped when the last
session using it ends. A cluster that cannot be built or started FAILS the tests with the reason;
it is never skipped. Loaded as a plugin by tests/conftest.py, so no tier imports another's
conftest.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client, config

from deploy.devcluster import build, gotool, launcher
from deploy.devcluster.config import load_settings

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
    wants_cluster = any(
        item.get_closest_marker("cluster") or "kube_cluster" in getattr(item, "fixturenames", ())
        for item in items
    )
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
    from deploy.devcluster.node import firewall
    from deploy.devcluster.node.build import containerd_built

    # kube-router too (the real node's NetworkPolicy test): cold it takes many minutes.
    if build.is_built(settings) and containerd_built(settings) and firewall.built(settings):
        return
    # Show the build's progress live: a silent half hour looks like a hang in CI.
    capture = session.config.pluginmanager.getplugin("capturemanager")
    try:
        with capture.global_and_fixture_disabled():
            build.build(settings)
    except gotool.BuildError as exc:
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
    except (launcher.StartError, gotool.BuildError, OSError) as exc:
        pytest.fail(f"cannot start the local control plane:\n{exc}", pytrace=False)
    api = config.new_client_from_config(str(settings.kubeconfig))
    try:
        yield KubeCluster(settings.kubeconfig, api, started_here)
    finally:
        api.close()
        # Stops the cluster only if a test session started it and no other
        # session on this machine still uses it.
        launcher.release(settings)
