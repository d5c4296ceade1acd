"""What tenants do every day passes every policy: the policies refuse what they name, and a
rule that errors (fails closed) on ordinary requests would refuse everything it matches."""

from __future__ import annotations

from kubernetes import client

from controller.reconcile import reconcile_project
from tests.cluster.controller.conftest import impersonating
from tests.helpers.wait import wait_for


def test_a_tenant_manages_its_own_secrets_and_service_accounts(tenant, kube_cluster) -> None:
    tenant.order("tranche-v100-8g", 1)
    reconcile_project(tenant.project.pk)
    ns = tenant.namespace
    api = impersonating(kube_cluster, "alice", [f"tranche.dev:tenant:{ns}"])
    core = client.CoreV1Api(api)
    try:
        core.create_namespaced_secret(
            ns, {"metadata": {"name": "db"}, "stringData": {"password": "x"}}
        )
        core.patch_namespaced_secret("db", ns, {"stringData": {"password": "y"}})
        core.delete_namespaced_secret("db", ns)
        core.create_namespaced_service_account(ns, {"metadata": {"name": "runner"}})
        core.patch_namespaced_service_account("runner", ns, {"metadata": {"labels": {"team": "a"}}})
        core.delete_namespaced_service_account("runner", ns)
        wait_for(
            lambda: "runner" not in [s.metadata.name for s in
                                     core.list_namespaced_service_account(ns).items],
            10,
            "the tenant's ServiceAccount to be gone",
        )  # fmt: skip
    finally:
        api.close()
