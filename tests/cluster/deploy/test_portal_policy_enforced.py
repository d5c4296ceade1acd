"""Issue #31: the chart's portal NetworkPolicy, enforced on the real node, refuses a tenant pod.

kube-router's firewall (deploy/devcluster/node/firewall.py) enforces NetworkPolicy on the real
node for the length of the test. The chart's NetworkPolicies are rendered with `helm template`
(the ingress namespace a value) and applied to a platform namespace holding a stand-in portal:
the chart's portal needs PostgreSQL and Redis and, in the real-node values, runs on the host
network, where no NetworkPolicy applies (docs/install.md); the stand-in carries the labels the
policy selects and serves HTTP on the portal's named port from the pod network. The dev cluster
has no kube-proxy, so the probes dial the endpoint's pod IP: a Service's traffic reaches the
same pod after DNAT and meets the same policy.

So the refusal cannot pass for another reason, one tenant pod (in a namespace rendered as the
reconcile makes it, with the project's own policy) reaches the portal before the policy and
after it is deleted, and a pod of the admitted ingress namespace reaches it throughout.
"""

from __future__ import annotations

import time

from kubernetes import client

from controller.render.namespace import render_namespace
from controller.render.network_policy import render_network_policy
from controller.render.spec import ProjectSpec
from deploy.devcluster.config import load_settings
from deploy.devcluster.node import build, firewall
from deploy.devcluster.node import run as node_run
from tests.cluster.deploy.test_chart import RELEASE, _docs, render
from tests.helpers.realnode import pod_body
from tests.helpers.wait import wait_for

NETCHECK = ["/netcheck"]
ROUNDS = 10  # probes (0.5 s apart) that must all agree once a state holds


def _verdicts(core: client.CoreV1Api, namespace: str, pod: str) -> list[tuple[int, str]]:
    text = core.read_namespaced_pod_log(pod, namespace, container="main")
    out = []
    for line in text.splitlines():
        seq, _, rest = line.partition(" ")
        if seq.isdigit():
            out.append((int(seq), rest))
    return out


def _last_seq(core, namespace, pod) -> int:
    found = _verdicts(core, namespace, pod)
    return found[-1][0] if found else 0


def _after(core, namespace, pod, seq: int) -> list[str]:
    return [rest for n, rest in _verdicts(core, namespace, pod) if n > seq]


def _running_ip(core: client.CoreV1Api, namespace: str, pod: str) -> str:
    def ip() -> str | None:
        status = core.read_namespaced_pod(pod, namespace).status
        return status.pod_ip if status.phase == "Running" else None

    return wait_for(ip, 90, f"pod {namespace}/{pod} to run")


def _selects(selector: dict, labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels and In/NotIn/Exists/DoesNotExist expressions)
    selects a pod with these labels, as the API server reads one."""
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for e in selector.get("matchExpressions", []):
        key, op, values = e["key"], e["operator"], e.get("values", [])
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def test_a_tenant_pod_is_refused_by_the_portal_policy_on_the_real_node(
    kube_cluster, real_node, make_namespace
) -> None:
    core = client.CoreV1Api(kube_cluster.api_client)
    net = client.NetworkingV1Api(kube_cluster.api_client)
    settings = load_settings()
    node_run.import_images(settings, real_node.paths, [build.netcheck_archive(settings)])

    platform = make_namespace()
    ingress = make_namespace()
    spec = ProjectSpec(project_id=1, namespace="placeholder", organization="acme", project="web")
    tenant = make_namespace(labels=render_namespace(spec)["metadata"]["labels"])
    spec = ProjectSpec(project_id=1, namespace=tenant, organization="acme", project="web",
                       ingress_namespaces=(ingress,))  # fmt: skip
    net.create_namespaced_network_policy(tenant, render_network_policy(spec))

    docs = _docs(render(["--set-json", f'networkPolicies.ingressNamespaces=["{ingress}"]']))
    policies = [d for (kind, _), d in docs.items() if kind == "NetworkPolicy"]
    portal_policy = docs[("NetworkPolicy", f"{RELEASE}-portal")]
    portal = docs[("Deployment", f"{RELEASE}-portal")]["spec"]["template"]
    labels = portal["metadata"]["labels"]  # the stand-in carries the portal pods' labels
    assert _selects(portal_policy["spec"]["podSelector"], labels)  # so the policy picks it
    (port,) = [p for p in portal["spec"]["containers"][0]["ports"] if p["name"] == "http"]
    port_number = port["containerPort"]

    with firewall.enforcing(settings, real_node.paths, kube_cluster.kubeconfig) as log:
        server = pod_body("portal", "", real_node.name, image=build.NETCHECK_IMAGE,
                          command=NETCHECK, args=["serve", str(port_number)])  # fmt: skip
        server["metadata"]["labels"] = labels
        server["spec"]["containers"][0]["ports"] = [port]
        core.create_namespaced_pod(platform, server)
        address = _running_ip(core, platform, "portal")
        probe = ["probe", address, str(port_number)]
        for namespace in (tenant, ingress):
            body = pod_body("probe", "", real_node.name, image=build.NETCHECK_IMAGE,
                            command=NETCHECK, args=probe)  # fmt: skip
            core.create_namespaced_pod(namespace, body)
            _running_ip(core, namespace, "probe")

        def holds(namespace: str, since: int, ok: bool) -> bool:
            seen = _after(core, namespace, "probe", since)[-ROUNDS:]
            return len(seen) == ROUNDS and all(s.startswith("ok ") == ok for s in seen)

        def seen(namespace: str, since: int) -> str:
            after = _after(core, namespace, "probe", since)
            status = core.read_namespaced_pod("probe", namespace).status
            restarts = [c.restart_count for c in status.container_statuses or []]
            return (f"{len(after)} verdicts after #{since} (phase {status.phase}, restarts "
                    f"{restarts}), the last: {after[-3:]}")  # fmt: skip

        def state(since_t: int, since_i: int, tenant_ok: bool, what: str) -> None:
            # the enforcer's log first: what is said last survives a shortened failure report
            wait_for(lambda: holds(tenant, since_t, tenant_ok) and holds(ingress, since_i, True),
                     120, lambda: "\n".join(log.read_text(errors="replace").splitlines()[-15:])
                     + f"\n{what}\ntenant: {seen(tenant, since_t)}"
                     f"\ningress: {seen(ingress, since_i)}")  # fmt: skip

        # 1. No portal policy: the tenant pod reaches the stand-in (the network works).
        state(0, 0, True, "both probes to reach the portal before its policy")
        assert _after(core, tenant, "probe", 0)[-1].startswith("ok HTTP/1.0 200")

        # 2. The chart's policies applied: the tenant pod refused, the ingress namespace admitted.
        marks = _last_seq(core, tenant, "probe"), _last_seq(core, ingress, "probe")
        applied = time.monotonic()
        for policy in policies:
            net.create_namespaced_network_policy(platform, policy)
        wait_for(lambda: any(not s.startswith("ok ") for s in _after(core, tenant, "probe",
                 marks[0])), 60, "the tenant probe to be refused")  # fmt: skip
        refused_after = time.monotonic() - applied
        state(*marks, False, "the tenant refused and the ingress pod admitted under the policy")
        tenant_seen = _after(core, tenant, "probe", marks[0])[-ROUNDS:]
        verdicts = sorted({s.split(" ")[0] for s in tenant_seen})
        took = f"{refused_after:.1f} s after it was applied"
        print(f"\nportal policy enforced {took}; the tenant's last {ROUNDS}: {verdicts}")  # noqa: T201

        # 3. The policy deleted: the same tenant pod reaches the portal again.
        marks = _last_seq(core, tenant, "probe"), _last_seq(core, ingress, "probe")
        for policy in policies:
            net.delete_namespaced_network_policy(policy["metadata"]["name"], platform)
        state(*marks, True, "the tenant probe to reach the portal once the policy is gone")
        for namespace, pod in ((tenant, "probe"), (ingress, "probe"), (platform, "portal")):
            core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
    assert firewall.leftovers() == []
