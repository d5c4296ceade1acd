"""A tenant works with the kubeconfig from the Cluster access page alone, within their rights.

Member of org A: applies the manifest page's YAML, sees the pod Running on a simulated slice,
reads events and `kubectl get all` without a Forbidden line, is named by `kubectl auth whoami`,
cannot exec, cannot touch quota, limits, templates, bindings or policies, and is refused in every
other namespace. A viewer reads and creates nothing; an outsider's kubeconfig has no context for
A's project and is refused there. Nothing secret is stored by the portal.
"""

from __future__ import annotations

import json

from controller.reconcile import reconcile_project
from deploy.devcluster.storage import ensure_demo_volumes
from portal.access.models import ClusterAccess
from portal.audit.models import AuditLog
from tests.cluster.access.conftest import forbidden
from tests.helpers.wait import wait_for

CLASS = "tranche-v100-8g"


def _manifest(user, project, product) -> str:
    from django.test import Client

    browser = Client()
    browser.force_login(user)
    page = browser.get(f"/projects/{project.pk}/manifests/{product.pk}/")
    assert page.status_code == 200
    assert "Cluster access" in page.content.decode()  # the page says where the kubeconfig is
    resp = browser.get(f"/projects/{project.pk}/manifests/{product.pk}/download/")
    assert resp.status_code == 200
    return resp.content.decode()


def test_member_viewer_and_outsider_with_their_downloaded_kubeconfigs(  # noqa: PLR0917
    make_tenant, person, download, fake_gpu_nodes, start_agent, kube_cluster
) -> None:
    a, b = make_tenant(), make_tenant()
    a.order(CLASS, 1)
    reconcile_project(a.project.pk)
    member, viewer = person(a, "member"), person(a, "viewer")
    reconcile_project(a.project.pk)  # the two new people's accounts
    reconcile_project(b.project.pk)
    ns, other_ns = a.namespace, b.namespace
    ensure_demo_volumes(kube_cluster.api_client)
    (node,) = fake_gpu_nodes(1)
    agent = start_agent(node)

    # --- member: identity, apply the manifest page's YAML, pod Running ---
    kubectl = download(member)
    ctx = f"{a.project.organization.slug}/{a.project.slug}"
    assert kubectl.contexts == {ctx: ns}
    assert kubectl.doc["current-context"] == ctx
    whoami = kubectl("auth", "whoami", "-o", "json")
    assert whoami.returncode == 0, whoami.stderr
    name = json.loads(whoami.stdout)["status"]["userInfo"]["username"]
    assert name == f"system:serviceaccount:{ns}:u-{member.username}-{member.pk}-1", name
    print(f"kubectl auth whoami: {name}")  # noqa: T201

    manifest = _manifest(member, a.project, a.products[CLASS])
    applied = kubectl("apply", "-f", "-", stdin=manifest)
    assert applied.returncode == 0, applied.stderr
    assert "Warning" not in applied.stderr, applied.stderr

    def running() -> bool:
        out = kubectl("get", "pods", "-o", "jsonpath={.items[*].status.phase}").stdout
        return out.strip() == "Running"

    wait_for(running, 90, f"the sample pod to run\n{agent.log_tail()}")

    listed = kubectl("get", "all")
    assert listed.returncode == 0, listed.stderr
    assert "Forbidden" not in listed.stderr, listed.stderr
    assert "deployment.apps/llm" in listed.stdout
    assert "pod/llm-" in listed.stdout
    events = kubectl("get", "events")
    assert events.returncode == 0, events.stderr
    logs = kubectl("auth", "can-i", "get", "pods", "--subresource=log")
    assert logs.stdout.strip() == "yes", logs.stderr
    for what in ("resourceclaims", "resourceclaimtemplates", "resourcequotas",
                 "horizontalpodautoscalers", "daemonsets", "replicationcontrollers"):  # fmt: skip
        can = kubectl("auth", "can-i", "get", what)
        assert can.stdout.strip() == "yes", f"get {what}: {can.stdout} {can.stderr}"
    quota = kubectl("get", "resourcequota", "tranche-quota", "-o", "json")
    assert quota.returncode == 0, quota.stderr

    pod = kubectl("get", "pods", "-o", "jsonpath={.items[0].metadata.name}").stdout
    assert forbidden(kubectl("exec", pod, "--", "true"))
    exec_ = kubectl("auth", "can-i", "create", "pods", "--subresource=exec")
    assert exec_.stdout.strip() == "no"
    for attempt in (
        ("delete", "resourcequota", "tranche-quota"),
        ("patch", "resourcequota", "tranche-quota", "-p", '{"spec":{"hard":{"pods":"99"}}}'),
        ("delete", "limitrange", "tranche-defaults"),
        ("delete", "resourceclaimtemplate", CLASS),
        ("delete", "rolebinding", "tranche-access-edit"),
        ("create", "rolebinding", "mine", "--clusterrole=admin", f"--user={name}"),
        ("delete", "validatingadmissionpolicy", "tranche-managed-objects"),
        ("create", "token", "default"),
    ):
        assert forbidden(kubectl(*attempt)), attempt

    # a colleague's account cannot be deleted, and no never-expiring token Secret can be made
    colleague = f"u-{viewer.username}-{viewer.pk}-1"
    wait_for(
        lambda: forbidden(kubectl("delete", "serviceaccount", colleague, "--dry-run=server")),
        15,
        "the accounts policy to refuse deleting a colleague's account",
    )
    own = name.rsplit(":", 1)[1]
    token_secret = (
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: forever\n  annotations:\n"
        f"    kubernetes.io/service-account.name: {own}\n"
        "type: kubernetes.io/service-account-token\n"
    )
    made = kubectl("create", "-f", "-", stdin=token_secret)
    assert forbidden(made), made.stdout
    assert "never expires" in made.stderr

    for elsewhere in ("default", "kube-system", other_ns):
        assert forbidden(kubectl("get", "pods", "-n", elsewhere)), elsewhere
        assert forbidden(kubectl("create", "configmap", "x", "-n", elsewhere)), elsewhere
    assert forbidden(kubectl("get", "namespaces"))

    # --- viewer: reads, creates and deletes nothing, sees no secrets ---
    view = download(viewer)
    assert view("get", "pods").returncode == 0
    assert view("get", "all").stderr.count("Forbidden") == 0
    assert forbidden(view("create", "configmap", "v"))
    assert forbidden(view("delete", "pod", pod))
    assert forbidden(view("get", "secrets"))
    assert forbidden(view("apply", "-f", "-", stdin=manifest.replace("llm", "viewers-llm")))

    # --- outsider (org B): no context for A's project, refused there ---
    outsider = download(b.membership.user)
    assert ns not in outsider.contexts.values()
    assert forbidden(outsider("get", "pods", "-n", ns))
    assert forbidden(outsider("create", "configmap", "x", "-n", ns))

    # --- nothing secret kept: no token in the portal's tables ---
    tokens = [u["user"]["token"] for k in (kubectl, view, outsider) for u in k.doc["users"]]
    stored = json.dumps(list(ClusterAccess.objects.values()), default=str) + json.dumps(
        list(AuditLog.objects.values("before", "after", "object_repr")), default=str
    )
    assert tokens
    assert not any(t in stored or t[-40:] in stored for t in tokens)
