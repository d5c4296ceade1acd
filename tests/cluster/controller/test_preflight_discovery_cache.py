"""Issue #28, finding 9: pre-flight's API-discovery cache is bounded. Every distinct apiVersion
a manifest named added an entry for good; now the oldest is dropped past the bound, and kinds
are still found right (the real API server's discovery)."""

from __future__ import annotations

from kubernetes import client

from portal.preflight import gather

GROUP_VERSIONS = (
    ("v1", "ConfigMap", ("configmaps", True)),
    ("apps/v1", "Deployment", ("deployments", True)),
    ("batch/v1", "Job", ("jobs", True)),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", ("clusterroles", False)),
    ("networking.k8s.io/v1", "NetworkPolicy", ("networkpolicies", True)),
    ("resource.k8s.io/v1", "DeviceClass", ("deviceclasses", False)),
)


def test_the_discovery_cache_keeps_at_most_its_bound(kube_cluster, monkeypatch) -> None:
    monkeypatch.setattr(gather, "MAX_GROUP_VERSIONS", 3)
    monkeypatch.setattr(gather, "DISCOVERY", gather._Discovery())
    api: client.ApiClient = kube_cluster.api_client
    for _round in range(2):  # the second round reads the dropped ones again
        for api_version, kind, expected in GROUP_VERSIONS:
            assert gather.resource_of(api, api_version, kind) == expected
            assert len(gather.DISCOVERY.resources) <= 3
    assert list(gather.DISCOVERY.resources) == [gv for gv, _, _ in GROUP_VERSIONS[-3:]]
