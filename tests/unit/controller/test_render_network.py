"""Tenants' network as rendered: the default NetworkPolicy of a project namespace, and the
service policy with NodePort/LoadBalancer allowed or not (the golden files pin the defaults;
tests/cluster/controller/test_admission_network.py runs them on the real API server)."""

from __future__ import annotations

from controller.render.bundle import render_platform
from controller.render.network_policy import render_network_policy
from controller.render.policies import services
from controller.render.spec import ProjectSpec


def _spec(**kw) -> ProjectSpec:
    return ProjectSpec(project_id=1, namespace="t-a-b-123456", organization="a", project="b", **kw)


def test_the_default_policy_admits_the_namespace_itself_and_the_ingress_namespaces_only() -> None:
    policy = render_network_policy(_spec(ingress_namespaces=("ingress-nginx", "edge")))
    assert policy["spec"]["podSelector"] == {}  # every pod of the namespace
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress stays open (images, API)
    [rule] = policy["spec"]["ingress"]
    assert rule["from"][0] == {"podSelector": {}}  # same namespace only: no namespaceSelector
    [expr] = rule["from"][1]["namespaceSelector"]["matchExpressions"]
    assert expr == {
        "key": "kubernetes.io/metadata.name",
        "operator": "In",
        "values": ["edge", "ingress-nginx"],
    }
    alone = render_network_policy(_spec())
    assert alone["spec"]["ingress"] == [{"from": [{"podSelector": {}}]}]


def _service_policy(objects: list[dict]) -> dict:
    [policy] = [
        o
        for o in objects
        if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"] == services.NAME
    ]
    return policy


def test_node_ports_are_refused_unless_the_setting_allows_them_and_external_ips_always() -> None:
    default = _service_policy(render_platform(()))["spec"]["validations"]
    allowed = _service_policy(render_platform((), node_ports_allowed=True))["spec"]["validations"]
    assert len(default) == 2
    assert "externalIPs" in default[0]["expression"]
    assert "NodePort" in default[1]["expression"]
    assert "LoadBalancer" in default[1]["expression"]
    assert allowed == default[:1]  # externalIPs stays refused whatever the setting
