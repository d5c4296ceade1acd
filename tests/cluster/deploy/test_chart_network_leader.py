"""Issue #31's chart values, rendered: the portal behind exactly `portal.proxy.trustedHops`
proxies (daphne does not read X-Forwarded-For itself), the portal NetworkPolicy admitting the
ingress controller's namespaces and the node agents only, and beat and the watcher
leader-elected. What they do once installed: tests/install/test_proxy.py, test_leader.py."""

from __future__ import annotations

from tests.cluster.deploy.test_chart import PRODUCTION, RELEASE, _docs, render


def _container(docs: dict, component: str) -> dict:
    return docs[("Deployment", f"{RELEASE}-{component}")]["spec"]["template"]["spec"]["containers"][
        0
    ]


def test_the_portal_trusts_the_configured_proxy_hops_not_daphne() -> None:
    defaults = _container(_docs(render([])), "portal")
    assert "--proxy-headers" not in defaults["args"]
    env = {e["name"]: e.get("value") for e in defaults["env"]}
    assert env["TRANCHE_TRUSTED_PROXY_HOPS"] == "0"  # no proxy named: the header is ignored
    assert "TRANCHE_PROXY_SSL_HEADER" not in env
    production = _container(_docs(render(PRODUCTION)), "portal")
    env = {e["name"]: e.get("value") for e in production["env"]}
    assert env["TRANCHE_TRUSTED_PROXY_HOPS"] == "1"  # the ingress controller
    assert env["TRANCHE_PROXY_SSL_HEADER"] == "X-Forwarded-Proto"


def test_the_portal_policy_admits_the_ingress_namespace_and_the_agents_only() -> None:
    extra = '[{"ipBlock": {"cidr": "10.0.0.0/24"}}]'
    namespaces = '["ingress-nginx", "lb"]'
    values = ["--set-json", f"networkPolicies.extraPortalPeers={extra}",
              "--set-json", f"networkPolicies.ingressNamespaces={namespaces}"]  # fmt: skip
    docs = _docs(render(values))
    policy = docs[("NetworkPolicy", f"{RELEASE}-portal")]["spec"]
    (rule,) = policy["ingress"]
    namespaces, agents, block = rule["from"]
    assert namespaces == {"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["ingress-nginx", "lb"]}
    ]}}  # fmt: skip
    agent_labels = {"app.kubernetes.io/name": "tranche", "app.kubernetes.io/instance": RELEASE,
                    "app.kubernetes.io/component": "node-agent"}  # fmt: skip
    assert agents == {"podSelector": {"matchLabels": agent_labels}}
    assert block == {"ipBlock": {"cidr": "10.0.0.0/24"}}
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    # an empty `from` (or a rule without one) would admit every pod, tenants' included
    default = _docs(render([]))[("NetworkPolicy", f"{RELEASE}-portal")]["spec"]["ingress"]
    assert all(r.get("from") for r in default), default


def test_beat_and_the_watcher_run_under_their_lease() -> None:
    docs = _docs(render(["--set", "beat.replicas=2", "--set", "watcher.replicas=2"]))
    for component, module in (("beat", "controller.beat"), ("watcher", "controller.watch")):
        deployment = docs[("Deployment", f"{RELEASE}-{component}")]
        assert deployment["spec"]["replicas"] == 2
        assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
        container = _container(docs, component)
        args = container["args"]
        assert args[:2] == ["-m", module]
        assert args[args.index("--lease") + 1] == f"tranche-{component}"
        env = {e["name"]: e for e in container["env"]}
        assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        spec = deployment["spec"]["template"]["spec"]
        assert spec["serviceAccountName"] == f"tranche-{component}"
    role = docs[("Role", "tranche:leader-election")]
    assert role["metadata"]["namespace"] == "tranche-system"
    named = [r for r in role["rules"] if "resourceNames" in r]
    assert named == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                      "resourceNames": ["tranche-beat", "tranche-watcher"],
                      "verbs": ["get", "update"]}]  # fmt: skip
    binding = docs[("RoleBinding", "tranche:leader-election")]
    assert {s["name"] for s in binding["subjects"]} == {"tranche-beat", "tranche-watcher"}
