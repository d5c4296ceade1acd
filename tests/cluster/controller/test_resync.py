"""Drift is repaired by the next resync, and a no-op resync of 100 projects writes nothing."""

from __future__ import annotations

import json
import time
from pathlib import Path

from kubernetes import client

from controller.apply import NAMESPACED_MANAGED, Applier
from controller.reconcile import reconcile_project, resync_all

CLASS = "tranche-v100-8g"


def test_drift_is_repaired_by_resync(tenant, kube_cluster) -> None:
    tenant.order(CLASS, 2)
    reconcile_project(tenant.project.pk)
    ns, api = tenant.namespace, kube_cluster.api_client
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    core.delete_namespaced_resource_quota("tranche-quota", ns)
    # Hand edits of the template are refused by the API itself (immutable spec, claim policy),
    # so the drift a human can cause is deleting it (or the quota).
    custom.delete_namespaced_custom_object(
        "resource.k8s.io", "v1", ns, "resourceclaimtemplates", CLASS
    )
    applier = Applier(api)
    result = reconcile_project(tenant.project.pk, applier, platform_cached=False)
    assert sorted(result.changes) == [
        f"applied ResourceClaimTemplate/{CLASS}",
        "applied ResourceQuota/tranche-quota",
    ]
    quota = core.read_namespaced_resource_quota("tranche-quota", ns)
    assert quota.spec.hard[f"{CLASS}.deviceclass.resource.k8s.io/devices"] == "2"
    template = custom.get_namespaced_custom_object(
        "resource.k8s.io", "v1", ns, "resourceclaimtemplates", CLASS
    )
    assert template["metadata"]["labels"]["tranche.dev/project"] == tenant.project.slug
    assert reconcile_project(tenant.project.pk, Applier(api)).writes == 0


def _resource_versions(applier: Applier, namespaces: list[str]) -> dict[tuple, str]:
    rvs = {}
    for ns in namespaces:
        for kind in NAMESPACED_MANAGED:
            for name, obj in applier.list_managed(*kind, namespace=ns).items():
                rvs[(ns, kind[1], name)] = obj["metadata"]["resourceVersion"]
    return rvs


def test_noop_resync_of_100_projects_issues_zero_writes(tenant, kube_cluster) -> None:
    from portal.tenants.models import Project
    from tranche.naming import derive_namespace

    org = tenant.project.organization
    tenant.order(CLASS, 1)
    for i in range(99):
        slug = f"p{i}"
        Project.objects.create(
            organization=org, name=slug, slug=slug, namespace=derive_namespace(org.slug, slug)
        )
    projects = list(Project.objects.filter(organization=org))
    assert len(projects) == 100
    api = kube_cluster.api_client
    try:
        first = resync_all(Applier(api))
        assert all(r.writes > 0 for r in first)  # the first pass creates everything
        namespaces = [p.namespace for p in projects]
        before = _resource_versions(Applier(api), namespaces)
        applier = Applier(api)
        started = time.monotonic()
        results = resync_all(applier)
        elapsed = time.monotonic() - started
        assert len(results) == 100
        assert applier.writes == 0, [c for r in results for c in r.changes]
        assert applier.calls["apply"] == 0
        assert applier.calls["delete"] == 0
        assert _resource_versions(Applier(api), namespaces) == before  # nothing changed server-side
        out = Path(__file__).resolve().parents[3] / "bench" / "results" / "noop_resync.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(
            json.dumps(
                {"projects": 100, "calls": dict(applier.calls), "seconds": round(elapsed, 2)}
            )
        )
    finally:
        core = client.CoreV1Api(api)
        for p in projects:
            if p.pk != tenant.project.pk:
                core.delete_namespace(p.namespace, propagation_policy="Background")


def test_a_namespace_from_the_per_namespace_role_version_is_migrated(tenant, kube_cluster) -> None:
    """Earlier versions bound a Role per namespace; roleRef is immutable, so the binding is
    recreated against the ClusterRole and the old Role is pruned. Tenants keep their rights."""
    tenant.order(CLASS, 1)
    reconcile_project(tenant.project.pk)
    ns, api = tenant.namespace, kube_cluster.api_client
    rbac = client.RbacAuthorizationV1Api(api)
    binding = rbac.read_namespaced_role_binding("tranche-tenant", ns)
    labels = binding.metadata.labels
    rules = rbac.read_cluster_role("tranche-tenant").rules
    rbac.delete_namespaced_role_binding("tranche-tenant", ns)
    rbac.create_namespaced_role(
        ns, {"metadata": {"name": "tranche-tenant", "labels": labels}, "rules": rules}
    )
    old = {
        "metadata": {"name": "tranche-tenant", "labels": labels},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "tranche-tenant",
        },
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": s.name}
            for s in binding.subjects
        ],
    }
    rbac.create_namespaced_role_binding(ns, old)

    result = reconcile_project(tenant.project.pk, Applier(api), platform_cached=False)
    assert "applied RoleBinding/tranche-tenant" in result.changes
    assert "deleted Role/tranche-tenant" in result.changes
    binding = rbac.read_namespaced_role_binding("tranche-tenant", ns)
    assert (binding.role_ref.kind, binding.role_ref.name) == ("ClusterRole", "tranche-tenant")
    # the old tenant Role is gone; only the portal's impersonation Role (current version) stays
    roles = [r.metadata.name for r in rbac.list_namespaced_role(ns).items]
    assert roles == ["tranche-portal-impersonate"]
    assert reconcile_project(tenant.project.pk, Applier(api)).writes == 0
