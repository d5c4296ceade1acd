"""Fixtures for the `cluster` tier: one real control plane per run, a fresh namespace per test.

If KUBECONFIG is set, tests run against that cluster and nothing is started or
stopped. Otherwise the local control plane (deploy.devcluster) is used: reused
if already running (`make cluster-up`, or another test session), else started
from an empty etcd and stopped when the last session using it ends. A cluster
that cannot be built or started FAILS the tests with the reason; it is never
skipped.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from deploy.devcluster.nodes import create_fake_gpu_nodes, delete_fake_nodes
from tests.helpers.cluster import KubeCluster


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
