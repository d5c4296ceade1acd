"""Acceptance on the real control plane: buying provisions the exact objects, the seed's three
attempts are judged by Kubernetes, pods are hardened, tenants are fenced in by RBAC + policy 4."""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from controller.reconcile import reconcile_project
from controller.render.bundle import render_platform, render_project
from controller.render.rbac import render_tenant_cluster_role
from controller.render.spec import ProjectSpec
from tests.cluster.controller.conftest import impersonating, wait_refused
from tests.helpers.wait import wait_for

CLASS = "tranche-v100-8g"
QUOTA_KEY = f"{CLASS}.deviceclass.resource.k8s.io/devices"


def _pod(name: str, container: dict | None = None, **spec) -> dict:
    c = {"name": "main", "image": "registry.invalid/tranche/workload:1", **(container or {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [c], **spec},
    }


def _claim(name: str, capacity: dict | None = None, **exactly) -> dict:
    ex = {
        "deviceClassName": CLASS,
        "count": 1,
        "capacity": {"requests": capacity or {"memory": "8Gi", "cores": "25"}},
        **exactly,
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": ex}]}},
    }


def _buy_and_reconcile(tenant, quantity: int = 2):
    order = tenant.order(CLASS, quantity)
    started = time.monotonic()
    result = reconcile_project(tenant.project.pk)
    order.refresh_from_db()
    return order, result, time.monotonic() - started


def test_buy_two_8g_provisions_exact_objects(tenant, kube_cluster) -> None:
    from controller.desired import load_project, platform_products, platform_users

    order, _result, seconds = _buy_and_reconcile(tenant)
    assert order.state == "active", order.conditions
    assert seconds < 10, f"reconcile took {seconds:.1f}s"
    ready = {c["type"]: c for c in order.conditions}["Ready"]
    assert (ready["status"], ready["reason"]) == ("True", "QuotaApplied")

    api = kube_cluster.api_client
    ns = tenant.namespace
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    spec: ProjectSpec = load_project(tenant.project.pk).spec
    want = {(o["kind"], o["metadata"]["name"]): o for o in render_project(spec)}
    namespace = core.read_namespace(ns).metadata
    assert namespace.labels["tranche.dev/tenant"] == "true"
    assert namespace.labels["pod-security.kubernetes.io/enforce"] == "baseline"
    quota = core.read_namespaced_resource_quota("tranche-quota", ns)
    assert quota.spec.hard[QUOTA_KEY] == "2"
    assert quota.spec.hard == want[("ResourceQuota", "tranche-quota")]["spec"]["hard"]
    lr = core.read_namespaced_limit_range("tranche-defaults", ns).spec.limits[0]
    assert lr.default["memory"] == "4Gi"
    assert lr.default_request["memory"] == "2Gi"
    role = api.sanitize_for_serialization(rbac.read_cluster_role("tranche-tenant"))
    assert role["rules"] == render_tenant_cluster_role()["rules"]
    binding = rbac.read_namespaced_role_binding("tranche-tenant", ns)
    assert (binding.role_ref.kind, binding.role_ref.name) == ("ClusterRole", "tranche-tenant")
    assert binding.subjects[0].name == f"tranche.dev:tenant:{ns}"
    # tenants' rights: one ClusterRole, no Role per namespace; the one Role is the portal's
    # impersonation of the members' accounts (it names them: RBAC has no name prefixes)
    [role] = rbac.list_namespaced_role(ns).items
    assert role.metadata.name == "tranche-portal-impersonate"
    assert [(r.resources, r.verbs) for r in role.rules] == [(["serviceaccounts"], ["impersonate"])]

    custom = client.CustomObjectsApi(api)
    template = custom.get_namespaced_custom_object(
        "resource.k8s.io", "v1", ns, "resourceclaimtemplates", CLASS
    )
    req = template["spec"]["spec"]["devices"]["requests"][0]
    assert req["name"] == "gpu"
    assert req["exactly"]["deviceClassName"] == CLASS
    assert req["exactly"]["count"] == 1
    assert req["exactly"]["capacity"]["requests"] == {"memory": "8Gi", "cores": "25"}
    assert (
        template["metadata"]["labels"]
        == want[("ResourceClaimTemplate", CLASS)]["metadata"]["labels"]
    )

    platform = {
        o["metadata"]["name"]: o for o in render_platform(platform_products(), platform_users())
    }
    dc = custom.get_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", CLASS)
    assert dc["spec"]["selectors"] == platform[CLASS]["spec"]["selectors"]
    for name in (
        "tranche-no-device-plugin-gpus",
        "tranche-claim-form",
        "tranche-pod-hardening",
        "tranche-managed-objects",
        "tranche-tenant-accounts",
    ):
        for plural in ("validatingadmissionpolicies", "validatingadmissionpolicybindings"):
            live = custom.get_cluster_custom_object(
                "admissionregistration.k8s.io", "v1", plural, name
            )
            assert live["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tranche"
        vap = custom.get_cluster_custom_object(
            "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", name
        )
        # the API server type-checked every expression; none may fail to compile
        assert not any(
            w
            for w in vap.get("status", {}).get("typeChecking", {}).get("expressionWarnings", [])
            if "compile" in w.get("warning", "").lower()
        ), vap["status"]
    again = reconcile_project(tenant.project.pk)
    assert again.writes == 0, again.changes


def test_seed_three_attempts(tenant, kube_cluster) -> None:
    _buy_and_reconcile(tenant)
    ns, api = tenant.namespace, kube_cluster.api_client
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)

    # 1. a raw nvidia.com/gpu pod is denied by policy 1 with its message
    body = wait_refused(
        lambda: core.create_namespaced_pod(
            ns, _pod("raw-gpu", {"resources": {"limits": {"nvidia.com/gpu": "1"}}})
        ),
        "a pod asking for nvidia.com/gpu",
        "does not offer: shared GPU slices are only available through resource claims",
    )
    assert "ValidatingAdmissionPolicy 'tranche-no-device-plugin-gpus'" in body

    # 2. hand-written templates: wrong capacity, then a selector
    def template(name: str, **kw) -> dict:
        claim = _claim(name, **kw)
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": CLASS, "labels": {"app.kubernetes.io/managed-by": "tranche"}},
            "spec": {"spec": claim["spec"]},
        }

    def create_template(body: dict) -> None:
        custom.create_namespaced_custom_object(
            "resource.k8s.io", "v1", ns, "resourceclaimtemplates", body
        )

    wait_refused(
        lambda: create_template(template("x", capacity={"memory": "10Gi", "cores": "25"})),
        "a template with 10Gi",
        "must request exactly the capacity",
    )
    wait_refused(
        lambda: create_template(template("x", selectors=[{"cel": {"expression": "true"}}])),
        "a template with a selector",
        "sets selectors",
    )
    wait_refused(
        lambda: custom.create_namespaced_custom_object(
            "resource.k8s.io",
            "v1",
            ns,
            "resourceclaims",
            _claim(
                "other",
                capacity={"memory": "16Gi", "cores": "50"},
                deviceClassName="tranche-v100-16g",
            ),
        ),
        "a claim of a class not sold to the project",
        "is not sold to this project",
    )

    # 3. the documented form is admitted; a third claim is refused by Kubernetes' quota
    wait_for(
        lambda: (core.read_namespaced_resource_quota("tranche-quota", ns).status.hard or {}).get(
            QUOTA_KEY
        ),
        20,
        "the quota controller to compute the quota's status",
    )
    for name in ("slice-1", "slice-2"):
        custom.create_namespaced_custom_object(
            "resource.k8s.io", "v1", ns, "resourceclaims", _claim(name)
        )
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(
            "resource.k8s.io", "v1", ns, "resourceclaims", _claim("slice-3")
        )
    assert refused.value.status == 403
    assert "exceeded quota" in refused.value.body
    assert QUOTA_KEY in refused.value.body


def test_pod_hardening_and_tenant_fence(tenant, kube_cluster) -> None:
    _buy_and_reconcile(tenant)
    ns, admin = tenant.namespace, kube_cluster.api_client
    core = client.CoreV1Api(admin)
    wait_refused(
        lambda: core.create_namespaced_pod(
            ns, _pod("preload", {"env": [{"name": "LD_PRELOAD", "value": "/x.so"}]})
        ),
        "a pod setting LD_PRELOAD",
        "set LD_PRELOAD",
    )
    wait_refused(
        lambda: core.create_namespaced_pod(
            ns, _pod("hostpath", volumes=[{"name": "h", "hostPath": {"path": "/"}}])
        ),
        "a pod mounting hostPath",
        "hostPath",
    )

    tenant_api = impersonating(kube_cluster, "alice", [f"tranche.dev:tenant:{ns}"])
    t_core = client.CoreV1Api(tenant_api)
    t_core.list_namespaced_pod(ns)  # the tenant can work here
    with pytest.raises(ApiException) as exec_:
        t_core.connect_post_namespaced_pod_exec("any", ns, command=["sh"], stdout=True)
    assert exec_.value.status == 403
    with pytest.raises(ApiException) as quota:
        t_core.patch_namespaced_resource_quota(
            "tranche-quota", ns, {"spec": {"hard": {QUOTA_KEY: "99"}}}
        )
    assert quota.value.status == 403
    with pytest.raises(ApiException) as vap:
        client.AdmissionregistrationV1Api(tenant_api).delete_validating_admission_policy(
            "tranche-claim-form"
        )
    assert vap.value.status == 403
    # RBAC lets tenants manage ConfigMaps; policy 4 still protects the managed one
    with pytest.raises(ApiException) as cm:
        t_core.delete_namespaced_config_map("tranche-entitlements", ns)
    assert cm.value.status == 403
    assert "managed by Tranche" in cm.value.body
    tenant_api.close()
