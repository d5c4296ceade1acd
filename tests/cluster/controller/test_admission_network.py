"""Tenants' network on the real API server (issue #28, finding 7).

At 7382faa a tenant's Service could claim `externalIPs` (the CVE-2020-8554 interception
pattern) or open node ports, and project namespaces had no NetworkPolicy. Now: every project
namespace gets the default ingress policy (its own pods and the platform's ingress only), which
tenants can neither change nor delete; `externalIPs` is refused always, NodePort and
LoadBalancer unless the product allows them (`ALLOW_NODE_PORT_SERVICES`). Whether the policy is
*enforced* depends on the network plugin (docs/security.md); what the API server holds and
admits is tested here.
"""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from controller.apply import Applier
from controller.reconcile import reconcile_project, sync_platform
from controller.render.network_policy import NAME as NETWORK_POLICY
from tests.cluster.controller.conftest import impersonating
from tests.helpers.wait import wait_for


def _service(name: str, kind: str = "ClusterIP", external_ips: list[str] | None = None) -> dict:
    spec: dict = {"type": kind, "selector": {"app": name}, "ports": [{"port": 80}]}
    if external_ips:
        spec["externalIPs"] = external_ips
    return {"metadata": {"name": name}, "spec": spec}


def _refused(create) -> str | None:
    try:
        create()
    except ApiException as exc:
        return exc.body if exc.status in (403, 422) else None
    return None


def test_services_stay_inside_the_cluster_and_the_namespace_admits_only_its_own(
    tenant, kube_cluster, settings
) -> None:
    settings.TENANT_INGRESS_NAMESPACES = ["ingress-nginx"]
    reconcile_project(tenant.project.pk, platform_cached=False)
    ns = tenant.namespace
    api = impersonating(kube_cluster, "alice", [f"tranche.dev:tenant:{ns}"])
    core = client.CoreV1Api(api)
    net = client.NetworkingV1Api(kube_cluster.api_client)
    try:
        # the default policy, as rendered
        policy = net.read_namespaced_network_policy(NETWORK_POLICY, ns)
        assert policy.spec.pod_selector.match_labels is None  # every pod
        [rule] = policy.spec.ingress
        same_ns, ingress = rule._from
        assert same_ns.namespace_selector is None
        assert same_ns.pod_selector is not None
        [expr] = ingress.namespace_selector.match_expressions
        assert (expr.key, expr.values) == ("kubernetes.io/metadata.name", ["ingress-nginx"])
        tenant_net = client.NetworkingV1Api(api)
        for attempt in (
            lambda: tenant_net.delete_namespaced_network_policy(NETWORK_POLICY, ns),
            lambda: tenant_net.patch_namespaced_network_policy(
                NETWORK_POLICY, ns, {"spec": {"ingress": [{}]}}
            ),
        ):
            with pytest.raises(ApiException) as refusal:
                attempt()
            assert refusal.value.status == 403

        # externalIPs: the interception pattern, refused (wait: policies load asynchronously)
        body = wait_for(
            lambda: _refused(
                lambda: core.create_namespaced_service(
                    ns, _service("grab", external_ips=["10.96.0.10"]), dry_run="All"
                )
            ),
            20,
            "a Service with externalIPs to be refused",
        )
        assert "spec.externalIPs" in body
        assert "Remove externalIPs" in body
        for kind in ("NodePort", "LoadBalancer"):
            with pytest.raises(ApiException) as refusal:
                core.create_namespaced_service(ns, _service(kind.lower(), kind))
            assert f"is of type {kind}" in refusal.value.body
            assert "ClusterIP" in refusal.value.body
        core.create_namespaced_service(ns, _service("web"))  # ClusterIP: admitted

        # the product allows node ports: NodePort passes, externalIPs still does not
        settings.ALLOW_NODE_PORT_SERVICES = True
        sync_platform(Applier(kube_cluster.api_client), prune=False)
        wait_for(
            lambda: (
                _refused(
                    lambda: core.create_namespaced_service(
                        ns, _service("np", "NodePort"), dry_run="All"
                    )
                )
                is None
            ),
            20,
            "NodePort Services to be admitted once allowed",
        )
        core.create_namespaced_service(ns, _service("np", "NodePort"))
        with pytest.raises(ApiException) as refusal:
            core.create_namespaced_service(ns, _service("grab", external_ips=["10.96.0.10"]))
        assert "spec.externalIPs" in refusal.value.body
    finally:
        settings.ALLOW_NODE_PORT_SERVICES = False
        sync_platform(Applier(kube_cluster.api_client), prune=False)
        api.close()
