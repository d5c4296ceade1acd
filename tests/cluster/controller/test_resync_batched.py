"""The periodic resync reads per kind, not per project, and still repairs drift safely.

What beat runs (`controller.tasks.resync`: every project, then the metering ledger) is measured
through its Applier's counters and Django's query log: a no-op resync of 12 projects issues the
same LISTs and the same queries as one of 3, and no GET and no write. Drift in one project is
repaired by the resync, and a snapshot older than a per-order reconcile never undoes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext
from kubernetes import client

from controller import desired, metering
from controller.apply import Applier
from controller.reconcile import LiveSnapshot, reconcile_project, resync_all, resync_project

CLASS = "tranche-v100-8g"
QUOTA_KEY = f"{CLASS}.deviceclass.resource.k8s.io/devices"
LEDGER_QUERIES = 4  # targets (projects, products), the records of listed claims, the open ones


def _tenants(make_tenant: Callable[[], Any], count: int) -> list[Any]:
    tenants = [make_tenant() for _ in range(count)]
    for tenant in tenants:
        tenant.order(CLASS, 1)
    return tenants


def _noop_resync(api: client.ApiClient) -> tuple[Applier, int, int, list]:
    """Run the resync as beat does; the Applier, the queries of the projects' part and of the
    ledger's part, and the per-project results."""
    applier = Applier(api)
    with CaptureQueriesContext(connection) as projects_part:
        results = resync_all(applier)
    with CaptureQueriesContext(connection) as ledger_part:
        metering.resync_ledger(applier)
    return applier, len(projects_part), len(ledger_part), results


def test_noop_resync_reads_per_kind_whatever_the_number_of_projects(
    make_tenant, kube_cluster
) -> None:
    api = kube_cluster.api_client
    _tenants(make_tenant, 3)
    resync_all(Applier(api))  # creates everything, orders become active
    small, small_queries, small_ledger, results = _noop_resync(api)
    assert len(results) == 3
    _tenants(make_tenant, 9)
    resync_all(Applier(api))
    large, large_queries, large_ledger, results = _noop_resync(api)
    assert len(results) == 12

    for applier in (small, large):
        assert applier.writes == 0, [c for r in results for c in r.changes]
        assert applier.calls["get"] == 0  # no per-project GET of the namespace
    # one LIST per kind: namespaces, 8 namespaced kinds, 4 platform kinds, the claims
    assert large.lists == small.lists
    assert set(large.lists.values()) == {1}, large.lists
    assert large.calls["list"] == 14
    assert large_queries == small_queries, "the projects' part queries per project"
    assert large_queries <= 6  # platform products + subscriptions, orders, projects, members x2
    assert max(small_ledger, large_ledger) <= LEDGER_QUERIES


def test_drift_in_one_project_is_repaired_by_the_resync_alone(make_tenant, kube_cluster) -> None:
    api = kube_cluster.api_client
    tenants = _tenants(make_tenant, 3)
    resync_all(Applier(api))
    drifted = tenants[1]
    core = client.CoreV1Api(api)
    core.patch_namespaced_resource_quota(
        "tranche-quota", drifted.namespace, {"spec": {"hard": {QUOTA_KEY: "9"}}}
    )
    stray = {"metadata": {"name": "stray", "labels": {"app.kubernetes.io/managed-by": "tranche"}}}
    core.create_namespaced_config_map(drifted.namespace, stray)

    applier = Applier(api)
    results = {r.project_id: r for r in resync_all(applier)}
    assert sorted(results[drifted.project.pk].changes) == [
        "applied ResourceQuota/tranche-quota",
        "deleted ConfigMap/stray",
    ]
    assert all(not r.changes for pid, r in results.items() if pid != drifted.project.pk)
    assert applier.calls["get"] == 1  # only the drifted project was read again, under its lock
    quota = core.read_namespaced_resource_quota("tranche-quota", drifted.namespace)
    assert quota.spec.hard[QUOTA_KEY] == "1"
    names = [c.metadata.name for c in core.list_namespaced_config_map(drifted.namespace).items]
    assert "stray" not in names
    again = Applier(api)
    resync_all(again)
    assert again.writes == 0


def test_a_snapshot_older_than_a_reconcile_never_downgrades_it(tenant, kube_cluster) -> None:
    """The resync's snapshots are taken before the project's lock; a per-order reconcile that
    runs in between (here: a resize to 2 that also repairs a deleted quota) is newer. The resync
    sees drift in its old snapshot (quota gone, quantity 1) and must not write 1 back."""
    from portal.orders.models import Order

    api = kube_cluster.api_client
    core = client.CoreV1Api(api)
    tenant.order(CLASS, 1)
    reconcile_project(tenant.project.pk, Applier(api))
    core.delete_namespaced_resource_quota("tranche-quota", tenant.namespace)
    applier = Applier(api)
    state = desired.load_projects(desired.platform_products())[tenant.project.pk]
    live = LiveSnapshot.read(applier).project(tenant.namespace)

    resize = tenant.order(CLASS, 2)
    reconcile_project(tenant.project.pk, Applier(api))  # the newer reconcile, after the snapshot
    result = resync_project(state, live, applier)

    assert result is not None
    assert result.writes == 0, result.changes
    quota = core.read_namespaced_resource_quota("tranche-quota", tenant.namespace)
    assert quota.spec.hard[QUOTA_KEY] == "2"
    assert Order.objects.get(pk=resize.pk).state == Order.State.ACTIVE
