"""Tranche's identities are enough and no more, from both ways an operator installs them: the
kustomize base (`kubectl apply -k deploy/install`, identities impersonated) and the Helm chart
(`helm install`, real tokens of the chart's ServiceAccounts). Both render the one RBAC file
(deploy/chart/tranche/rbac/rbac.yaml). The real controller, watcher and node agent code runs as
each ServiceAccount against the real control plane, which judges every call with RBAC and the
admission policies; what each must not do is refused."""

from __future__ import annotations

import contextlib
import secrets
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from controller.apply import Applier
from controller.reconcile import reconcile_project
from deploy.devcluster.nodes import create_fake_gpu_nodes, delete_fake_nodes
from nodeagent.draplugin.prepare import api_claim_source
from nodeagent.owners import TenantPods
from nodeagent.slices import DRIVER, SlicePublisher
from tests.cluster.controller.conftest import impersonating
from tests.cluster.deploy.chart import install_chart, token_client, uninstall_chart
from tests.helpers.gpus import v100
from tests.helpers.wait import wait_for
from tranche.names import ENTITLEMENTS_CONFIGMAP as ENTITLEMENTS

INSTALL = Path(__file__).resolve().parents[3] / "deploy" / "install"
CLASS = "tranche-v100-8g"
TENANT_ROLES = (
    "tranche-tenant",
    "tranche-tenant-view",
    "tranche-tenant-suspended",
    "tranche-portal-tokens",
)


@pytest.fixture(scope="module", params=["deploy/install", "chart"])
def installed(request, kube_cluster) -> Iterator[Callable[[str], client.ApiClient]]:
    """Install the identities one way; yield `name -> client acting as that ServiceAccount`."""
    if request.param == "chart":
        nodes = create_fake_gpu_nodes(kube_cluster.api_client, 1, prefix="kwok-chart")
        try:
            install_chart(kube_cluster)
            yield lambda name: token_client(kube_cluster, name)
        finally:
            uninstall_chart(kube_cluster)
            delete_fake_nodes(kube_cluster.api_client, nodes)
        return
    # `kubectl apply --server-side -k deploy/install`, as an operator runs it (idempotent).
    proc = subprocess.run(
        [*kube_cluster.kubectl, "apply", "--server-side", "--field-manager=tranche-install",
         "-k", str(INSTALL)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    yield lambda name: as_sa(kube_cluster, name)


def as_sa(kube_cluster, name: str) -> client.ApiClient:
    return impersonating(
        kube_cluster, f"system:serviceaccount:tranche-system:{name}", ["system:serviceaccounts"]
    )


@contextlib.contextmanager
def impostor(kube_cluster):
    """A ServiceAccount holding exactly the controller's RBAC, under another name."""
    name = f"impostor-{secrets.token_hex(3)}"
    admin = kube_cluster.api_client
    core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    core.create_namespaced_service_account("tranche-system", {"metadata": {"name": name}})
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": f"tranche-test:{name}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "tranche:controller"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "tranche-system"}],
        }
    )  # fmt: skip
    try:
        yield as_sa(kube_cluster, name)
    finally:
        rbac.delete_cluster_role_binding(f"tranche-test:{name}")
        core.delete_namespaced_service_account(name, "tranche-system")


def _refusal(call, *args, **kwargs) -> int | None:
    """The status the API server refused `call` with, or None if it was accepted."""
    try:
        call(*args, **kwargs)
    except ApiException as exc:
        return exc.status
    return None


def _refused(call, *args, **kwargs) -> int:
    with pytest.raises(ApiException) as exc:
        call(*args, **kwargs)
    return exc.value.status


def test_the_controller_reconciles_and_repairs_as_its_service_account(
    installed, tenant, kube_cluster
) -> None:
    tenant.order(CLASS, 2)
    api = installed("tranche-controller")
    ns, admin = tenant.namespace, kube_cluster.api_client
    # Written from scratch by the controller: the tenant role holds rights it lacks (escalate).
    for role in TENANT_ROLES:
        with contextlib.suppress(ApiException):
            client.RbacAuthorizationV1Api(admin).delete_cluster_role(role)
    result = reconcile_project(tenant.project.pk, Applier(api), platform_cached=False)
    for role in TENANT_ROLES:
        assert f"applied ClusterRole/{role}" in result.changes
    # the owner's cluster account, bound to the tenant role, and the portal's token binding
    assert "applied RoleBinding/tranche-access-edit" in result.changes
    assert "applied RoleBinding/tranche-portal-tokens" in result.changes
    assert "applied ResourceQuota/tranche-quota" in result.changes
    quota = client.CoreV1Api(admin).read_namespaced_resource_quota("tranche-quota", ns)
    assert quota.spec.hard[f"{CLASS}.deviceclass.resource.k8s.io/devices"] == "2"
    binding = client.RbacAuthorizationV1Api(admin).read_namespaced_role_binding(
        "tranche-tenant", ns
    )
    assert binding.role_ref.name == "tranche-tenant"  # bound: `bind` on that role was enough

    # Drift repair updates objects the managed-objects policy protects: the controller's
    # identity is a platform user there, another identity with the same RBAC is not. Wait
    # until the policy this reconcile applied is in force (a tenant's edit is refused).
    tenant_core = client.CoreV1Api(
        impersonating(kube_cluster, "alice", [f"tranche.dev:tenant:{ns}"])
    )

    def edit() -> dict:  # a different value each time: a repeated edit would change nothing
        return {"data": {"edited": secrets.token_hex(4)}}

    wait_for(
        lambda: _refusal(tenant_core.patch_namespaced_config_map, ENTITLEMENTS, ns, edit()),
        15,
        "the managed-objects policy to refuse a tenant's edit",
    )
    drift = {"spec": {"hard": {"pods": "11"}}}
    with impostor(kube_cluster) as other:
        refused = _refusal(client.CoreV1Api(other).patch_namespaced_resource_quota,
                           "tranche-quota", ns, drift)  # fmt: skip
        assert refused == 403, "the policy must judge an identity with the same RBAC a tenant"
    client.CoreV1Api(api).patch_namespaced_resource_quota("tranche-quota", ns, drift)
    repaired = reconcile_project(tenant.project.pk, Applier(api), platform_cached=False)
    assert repaired.changes == ["applied ResourceQuota/tranche-quota"]
    assert reconcile_project(tenant.project.pk, Applier(api)).writes == 0

    # What it must not do: read tenants' secrets, run pods, mint other roles with rights it lacks.
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    assert _refused(core.list_namespaced_secret, ns) == 403
    pod = {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "x", "image": "x"}]}}
    assert _refused(core.create_namespaced_pod, ns, pod) == 403
    evil = {
        "metadata": {"name": f"tranche-test-{secrets.token_hex(3)}"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
    }
    assert _refused(rbac.create_cluster_role, evil) == 403


def test_the_watcher_lists_and_watches_and_writes_nothing(installed, kube_cluster) -> None:
    api = installed("tranche-watcher")
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    core.list_pod_for_all_namespaces(limit=1)
    core.list_event_for_all_namespaces(limit=1)
    resource.list_resource_claim_for_all_namespaces(limit=1)
    watch = core.list_pod_for_all_namespaces(watch=True, timeout_seconds=1, _preload_content=False)
    watch.release_conn()
    assert _refused(core.delete_collection_namespaced_pod, "default") == 403
    assert _refused(core.list_namespaced_secret, "default") == 403


def test_the_node_agent_publishes_reads_claims_and_asks_whose_pod(
    installed, kube_cluster, fake_gpu_nodes, make_namespace
) -> None:
    (node,) = fake_gpu_nodes(1)
    api = installed("tranche-agent")
    publisher = SlicePublisher(api, node)
    assert publisher.publish([v100(0), v100(1)]) is True
    slices = client.ResourceV1Api(kube_cluster.api_client).list_resource_slice(
        field_selector=f"spec.driver={DRIVER},spec.nodeName={node}"
    )
    assert len(slices.items[0].spec.devices) == 2

    ns = make_namespace()
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "spec": {"devices": {"requests": []}},
    }
    client.ResourceV1Api(kube_cluster.api_client).create_namespaced_resource_claim(ns, claim)
    assert api_claim_source(api)(ns, "c")["metadata"]["name"] == "c"
    assert TenantPods(api, node)("5eed0000-0000-4000-8000-0000000000ff") is None  # asked: no error

    core = client.CoreV1Api(api)
    assert _refused(core.delete_namespace, ns) == 403
    assert _refused(core.list_namespaced_secret, ns) == 403
    publisher.withdraw()


def test_the_portal_mints_tokens_for_tenant_accounts_and_does_nothing_else(
    installed, tenant, kube_cluster
) -> None:
    """The portal's identity holds serviceaccounts/token create in project namespaces only."""
    from portal.access.cluster import AccountNotReadyError, request_token
    from tranche.naming import account_name

    reconcile_project(tenant.project.pk)
    api = as_sa(kube_cluster, "tranche-portal")
    ns, owner = tenant.namespace, tenant.membership.user
    account = account_name(owner.username, owner.pk, 1)
    token, expires = request_token(api, ns, account, 600)
    assert token
    assert expires is not None
    with pytest.raises(AccountNotReadyError):  # asked where it may: the account is not there
        request_token(api, ns, "u-nobody-0-1", 600)
    # ...but only for people's accounts: not for the namespace's other ServiceAccounts (policy 5)
    core = client.CoreV1Api(api)
    body = {"spec": {"expirationSeconds": 600}}
    wait_for(
        lambda: _refusal(core.create_namespaced_service_account_token, "default", ns, body) == 403,
        15,
        "the accounts policy to refuse a token for the namespace's default ServiceAccount",
    )

    for where, who in (("kube-system", "default"), ("tranche-system", "tranche-controller"),
                       ("default", "default")):  # fmt: skip
        assert _refused(core.create_namespaced_service_account_token, who, where, body) == 403
    assert _refused(core.list_namespaced_secret, ns) == 403
    assert _refused(core.list_namespaced_pod, ns) == 403
    assert _refused(core.list_namespaced_service_account, ns) == 403
    assert _refused(core.delete_namespaced_service_account, account, ns) == 403
    rbac = client.RbacAuthorizationV1Api(api)
    assert _refused(rbac.list_namespaced_role_binding, ns) == 403
    assert _refused(core.list_namespace) == 403


def _as(api: client.ApiClient, user: str) -> client.ApiClient:
    """The same token, impersonating `user` (as pre-flight's dry run does)."""
    imp = client.ApiClient(api.configuration)
    imp.set_default_header("Impersonate-User", user)
    return imp


def test_the_portal_reads_what_preflight_needs_and_dry_runs_only_as_members(
    installed, tenant, kube_cluster
) -> None:
    """Pre-flight's reads (portal/preflight/gather.py) and its dry run as a member's account
    succeed with the portal's own token; impersonating anyone else, or writing, is refused."""
    from portal.preflight.gather import QUOTA_NAME
    from tests.cluster.deploy.chart import token_client
    from tranche.naming import account_name

    tenant.order(CLASS, 1)
    reconcile_project(tenant.project.pk)
    api = token_client(kube_cluster, "tranche-portal")  # a real token: it will impersonate
    ns, owner = tenant.namespace, tenant.membership.user
    account = account_name(owner.username, owner.pk, 1)
    core, dra = client.CoreV1Api(api), client.CustomObjectsApi(api)
    assert core.read_namespaced_resource_quota(QUOTA_NAME, ns).spec.hard
    assert core.list_namespaced_persistent_volume_claim(ns).items == []
    for plural in ("resourceslices", "resourceclaims"):
        dra.list_cluster_custom_object("resource.k8s.io", "v1", plural)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dry"},
           "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}  # fmt: skip
    # as the member's own account: the dry run is judged with that account's rights (accepted)
    member = client.CoreV1Api(_as(api, f"system:serviceaccount:{ns}:{account}"))
    wait_for(
        lambda: _refusal(member.create_namespaced_pod, ns, pod, dry_run="All") is None,
        15,
        "the portal's impersonation Role to let a dry run act as the member's account",
    )
    admin = client.CoreV1Api(kube_cluster.api_client)
    assert _refused(admin.read_namespaced_pod, "dry", ns) == 404  # nothing was created

    # refused: writing for real, secrets, other accounts, other namespaces, the cluster's rights
    assert _refused(core.create_namespaced_pod, ns, pod) == 403
    assert _refused(core.create_namespaced_pod, ns, pod, dry_run="All") == 403  # as itself
    assert _refused(core.list_namespaced_secret, ns) == 403
    assert _refused(core.read_namespaced_resource_quota, QUOTA_NAME, "kube-system") == 403
    assert _refused(core.list_namespaced_persistent_volume_claim, "default") == 403
    assert _refused(dra.create_cluster_custom_object, "resource.k8s.io", "v1",
                    "resourceslices", {"metadata": {"name": "x"}}) == 403  # fmt: skip
    for user in (f"system:serviceaccount:{ns}:default",
                 "system:serviceaccount:kube-system:default",
                 "system:serviceaccount:tranche-system:tranche-controller",
                 "system:admin", "system:serviceaccount:{ns}:u-nobody-0-1"):  # fmt: skip
        someone = client.CoreV1Api(_as(api, user.replace("{ns}", ns)))
        assert _refused(someone.list_namespaced_pod, ns) == 403, user
    group = _as(api, f"system:serviceaccount:{ns}:{account}")
    group.set_default_header("Impersonate-Group", "system:masters")
    assert _refused(client.CoreV1Api(group).list_namespaced_secret, ns) == 403


def test_preflight_end_to_end_as_the_portals_own_token_gets_real_verdicts(
    installed, tenant, kube_cluster, settings, tmp_path
) -> None:
    """The portal's ServiceAccount token (not admin) runs pre-flight: each cluster check answers."""
    import yaml

    from portal.preflight.service import run_preflight
    from tests.cluster.controller.test_preflight import sample
    from tests.cluster.deploy.chart import token_client

    tenant.order(CLASS, 1)
    reconcile_project(tenant.project.pk)
    portal = token_client(kube_cluster, "tranche-portal").configuration
    kubeconfig = tmp_path / "portal.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "portal",
        "clusters": [{"name": "c", "cluster": {"server": portal.host,
                                                "certificate-authority": portal.ssl_ca_cert}}],
        "users": [{"name": "portal", "user": {"token": portal.api_key["authorization"][7:]}}],
        "contexts": [{"name": "portal", "context": {"cluster": "c", "user": "portal"}}],
    }))  # fmt: skip
    settings.CLUSTER_ACCESS_KUBECONFIG = str(kubeconfig)

    def report():
        return run_preflight(tenant.membership.user, tenant.project, sample(tenant),
                             scan_images=False)  # fmt: skip

    wait_for(lambda: not [v for v in report().verdicts if v.check == "cluster"], 15,
             "pre-flight's cluster checks to answer as the portal's identity")  # fmt: skip
    by_check = {(v.check, v.subject): v for v in report().verdicts}
    checks = {check for check, _ in by_check}
    assert {"admission", "gpu_quota", "capacity"} <= checks, by_check
    [admitted] = [v for (c, s), v in by_check.items() if c == "admission" and s == "Deployment/llm"]
    assert admitted.level == "ok", admitted
    [quota] = [v for (c, _), v in by_check.items() if c == "gpu_quota"]
    assert quota.level == "ok"
    assert quota.figures["entitled"] == 1
