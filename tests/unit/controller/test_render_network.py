"""Tenants' network as rendered: the default NetworkPolicy of a project namespace, and the
service policy with NodePort/LoadBalancer allowed or not (the golden files pin the defaults;
tests/cluster/controller/test_admission_network.py runs them on the real API server)."""

from __future__ import annotations

from controller.render.bundle import render_platform
from controller.render.network_policy import render_network_policy
from controller.render.policies import services
from controller.render.policies.services import render_service_policy
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
    assert len(default) == 3
    assert "externalIPs" in default[0]["expression"]
    assert "NodePort" in default[1]["expression"]
    assert "LoadBalancer" in default[1]["expression"]
    # externalIPs and ExternalName stay refused whatever the node-port setting
    assert allowed == [default[0], default[2]]


def test_external_name_services_are_refused_unless_offered() -> None:
    """#45: an ExternalName Service was admitted (the cluster's DNS then answers for it with any
    host the tenant names)."""
    refused = render_service_policy()["spec"]["validations"]
    [rule] = [v for v in refused if "ExternalName" in v["expression"]]
    assert rule["expression"] == "!has(object.spec.type) || object.spec.type != 'ExternalName'"
    assert "this platform does not offer that" in rule["messageExpression"]
    offered = render_service_policy(external_names_allowed=True)["spec"]["validations"]
    assert not [v for v in offered if "ExternalName" in v["expression"]]
