"""Upgrade and uninstall of the installed chart, in this order (the last tests of the tier).

`helm upgrade` to the second tag of the images (`<version>-<commit>`, as an operator moves to a
new build) rolls every Deployment and the DaemonSet while a tenant's pod runs on the real node
and an order is placed: no order fails, the pod keeps running (same uid, no restart) and its
slice config on the node is unchanged (the new agent re-reads its checkpoint). `helm uninstall`
then leaves no platform object, and what docs/install.md says stays, stays.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from kubernetes import client

from tests.helpers.wait import wait_for
from tests.install.installation import LAYOUT, NAMESPACE, RELEASE, Installation, version
from tests.install.tenant import (
    Tenant,
    as_tenant,
    seed_catalogue,
    tenant_manifest,
    tenant_namespace,
)

INSTANCE = f"app.kubernetes.io/instance={RELEASE}"


def _second_tag() -> str:
    index = json.loads((LAYOUT / "index.json").read_text())
    refs = {m["annotations"]["org.opencontainers.image.ref.name"] for m in index["manifests"]}
    tags = {r.split(":", 1)[1] for r in refs if r.startswith("tranche:")} - {version()}
    assert len(tags) == 1, refs
    return tags.pop()


def _slice_files(installation: Installation) -> dict[str, bytes]:
    """What the agent wrote for prepared claims: slice configs (claims/) and CDI specs."""
    state = installation.node.root / "tranche" / installation.node.name / "claims"
    files = {str(p.relative_to(state)): p.read_bytes() for p in state.rglob("*") if p.is_file()}
    cdi = installation.node.cdi_dir
    files |= {f"cdi/{p.name}": p.read_bytes() for p in cdi.glob("*") if p.is_file()}
    return files


def _images(installation: Installation) -> dict[str, str]:
    return {
        f"{p.metadata.name}/{c.name}": c.image
        for p in installation.pods()
        for c in p.spec.containers
    }


def test_upgrade_to_a_new_tag_keeps_orders_and_the_running_slice(
    installation: Installation, tmp_path: Path
) -> None:
    product_id = seed_catalogue(installation)
    tenant = Tenant(installation.url)
    project = tenant.sign_up(f"upg{int(time.time()) % 100000}", "Upgrade Labs", "inference")
    first = tenant.order(project, product_id, 1)
    wait_for(lambda: tenant.order_state(first) == "Active", 120, "the first order Active")
    kubeconfig = tmp_path / "tenant.kubeconfig"
    kubeconfig.write_text(tenant.kubeconfig())
    manifest = tenant.request(f"/projects/{project}/manifests/{product_id}/download/").body
    as_tenant(kubeconfig, "apply", "-f", "-", stdin=tenant_manifest(manifest))
    namespace = tenant_namespace(kubeconfig)
    core = client.CoreV1Api(installation.api)

    def running():
        pods = core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/name=llm")
        return next((p for p in pods.items if p.status.phase == "Running"), None)

    pod = wait_for(running, 120, "the tenant's pod Running")
    wait_for(lambda: "computing" in as_tenant(kubeconfig, "logs", pod.metadata.name), 60,
             "the sample computing")  # fmt: skip
    before = _slice_files(installation)
    assert before, "no slice config on the node for the running pod"

    tag = _second_tag()
    started = time.monotonic()
    values = installation.node.root.parent / "install-values.yaml"
    upgrade = installation.helm_async("upgrade", RELEASE, str(installation.chart), "-n", NAMESPACE,
                                      "-f", str(values), "--set", f"image.tag={tag}",
                                      "--wait", "--timeout", "300s")  # fmt: skip
    # An order placed while the platform rolls (the portal answers throughout: its new pod
    # starts only after the old one is gone on this one node, so retry until it answers).
    second = wait_for(lambda: _try_order(tenant, project, product_id, 2), 180,
                      "the portal taking an order during the upgrade")  # fmt: skip
    out, err = upgrade.communicate(timeout=400)
    assert upgrade.returncode == 0, f"helm upgrade:\n{out}\n{err}"
    rolled = time.monotonic() - started
    wait_for(
        installation.all_ready, 180, lambda: "every pod Ready again\n" + installation.describe()
    )

    def stale() -> dict[str, str]:  # terminating pods count: the old ones must be gone, not going
        return {p: i for p, i in _images(installation).items() if not i.endswith(f":{tag}")}

    # helm's --wait ends once the new pods are Ready; an old pod may still be stopping then
    # (a beat handing its Lease over), so wait for none to be left, and name any that stays.
    wait_for(lambda: not stale(), 120, lambda: f"pods still on the old tag: {stale()}")

    wait_for(
        lambda: tenant.order_state(second) == "Active",
        180,
        lambda: f"the order placed during the upgrade Active ({tenant.order_state(second)})",
    )
    orders = tenant.request(f"/projects/{project}/orders/").body
    assert "Failed" not in orders, orders

    after = core.read_namespaced_pod(pod.metadata.name, namespace)
    assert after.metadata.uid == pod.metadata.uid
    assert after.status.phase == "Running"
    assert after.status.container_statuses[0].restart_count == 0
    now = _slice_files(installation)
    for path, data in before.items():
        assert now.get(path) == data, f"{path} changed across the upgrade"
    # the new agent reports the pod again (from its checkpoint): the live page has it
    wait_for(lambda: pod.metadata.name in tenant.request(f"/projects/{project}/status/").body
             and "/ 8192 MiB" in tenant.request(f"/projects/{project}/status/").body, 60,
             "the pod on the live page after the agent's restart")  # fmt: skip
    print(f"\nhelm upgrade to {tag}: rolled and Ready in {rolled:.1f} s")  # noqa: T201
    as_tenant(kubeconfig, "delete", "deployment", "llm", "--wait=true")


def _try_order(tenant: Tenant, project: int, product_id: int, quantity: int) -> str | None:
    try:
        return tenant.order(project, product_id, quantity)
    except (AssertionError, OSError):
        return None


def test_uninstall_leaves_no_platform_object(installation: Installation) -> None:
    tenant_namespaces = (
        client.CoreV1Api(installation.api)
        .list_namespace(label_selector="app.kubernetes.io/managed-by=tranche")
        .items
    )
    assert tenant_namespaces, "the earlier tests' project namespaces"
    started = time.monotonic()
    installation.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "180s")
    gone = time.monotonic() - started
    core = client.CoreV1Api(installation.api)
    apps = client.AppsV1Api(installation.api)
    wait_for(lambda: not core.list_namespaced_pod(NAMESPACE).items, 120, "platform pods gone")
    assert not apps.list_namespaced_deployment(NAMESPACE).items
    assert not apps.list_namespaced_daemon_set(NAMESPACE).items
    assert not core.list_namespaced_service(NAMESPACE).items
    names = {sa.metadata.name for sa in core.list_namespaced_service_account(NAMESPACE).items}
    assert names <= {"default"}, names
    rbac = client.RbacAuthorizationV1Api(installation.api)
    roles = [r.metadata.name for r in rbac.list_cluster_role(label_selector=INSTANCE).items]
    assert not roles, roles
    policies = client.NetworkingV1Api(installation.api).list_namespaced_network_policy(NAMESPACE)
    assert not policies.items
    assert (
        not client.PolicyV1Api(installation.api)
        .list_namespaced_pod_disruption_budget(NAMESPACE)
        .items
    )
    # What stays on purpose (docs/install.md, "Uninstall: what stays"): the tenants' namespaces
    # and the chart-made Secret holding the secret key.
    for ns in tenant_namespaces:
        assert core.read_namespace(ns.metadata.name).status.phase == "Active"
    assert core.read_namespaced_secret(f"{RELEASE}-secrets", NAMESPACE)
    print(f"\nhelm uninstall: {gone:.1f} s")  # noqa: T201
