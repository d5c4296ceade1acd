"""The quota page's per-project figures are cached (portal/core/figures.py) and never stale:
each writer that changes them says so, and the next view shows the change (issue #35).

Every write goes through the real service a writer uses (order placed, the controller's
outcome, slice usage, CPU/RAM use, the cluster's view of pods), with the real Redis and
PostgreSQL, in transactions that commit (so `on_commit` runs as in production)."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from portal.cluster.services import record_namespace
from portal.core import figures
from portal.orders.lifecycle import store_outcome
from portal.orders.models import Subscription
from portal.orders.services import place_order
from tests.helpers.observed import namespace_view
from tranche.observed import ClassUsage, NamespaceView
from tranche.outcome import Condition, ProjectOutcome, SubscriptionOutcome

pytestmark = pytest.mark.django_db(transaction=True)
CPU_REFUSAL = (
    'Error creating: pods "web-7d9-x" is forbidden: exceeded quota: tranche-quota, '
    "requested: requests.cpu=1, used: requests.cpu=7500m, limited: requests.cpu=8"
)


def _page(client, project) -> str:
    response = client.get(reverse("quota", args=[project.pk]))
    assert response.status_code == 200
    return re.sub(r"\s+", " ", response.content.decode())


def _row(page: str, product) -> str:
    """The quota table's row of `product` (its cells' text)."""
    found = re.search(rf"<tr[^>]*>(?:(?!</tr>).)*{re.escape(product.name)}(?:(?!</tr>).)*</tr>",
                      page)  # fmt: skip
    assert found, f"no row for {product.name}"
    return re.sub(r"<[^>]+>", " ", found[0])


def _cells(row: str) -> list[str]:
    return re.findall(r"\d+", row)


def test_every_writer_of_the_quota_figures_shows_on_the_next_view(world, client_of):
    client = client_of(world.member)
    project, product = world.project_a, next(iter(world.products.values()))
    assert product.name not in _page(client, project)  # nothing bought yet: no line

    place_order(membership=world.membership(world.owner), project=project, product=product,
                quantity=2, idempotency_key="k-1")  # fmt: skip
    first = _row(_page(client, project), product)
    _page(client, project)  # a second view is served from the cache
    cls = product.device_class
    record_namespace(
        NamespaceView(project.namespace, usage={cls: ClassUsage(1, 1, "waiting for a GPU")})
    )
    after_usage = _row(_page(client, project), product)
    assert after_usage != first
    assert "waiting for a GPU" in _page(client, project)

    record_namespace(NamespaceView(project.namespace, usage={cls: ClassUsage(2, 0, "")}))
    assert _cells(_row(_page(client, project), product)) != _cells(after_usage)

    sub = Subscription.objects.get(project=project, product=product)
    held = "Your pods still hold the slices being removed."
    waiting = Condition("Ready", "False", "Waiting", held)
    store_outcome(ProjectOutcome(subscriptions=(SubscriptionOutcome(sub.pk, 1, (waiting,)),)))
    assert held in _page(client, project)

    used = {"hard": {}, "used": {"requests.cpu": "7500m", "requests.memory": "1Gi"}}
    record_namespace(namespace_view(project.namespace, quota=used))
    assert "7500 m" in _page(client, project)  # CPU used
    refused = [("ReplicaSet", "web-7d9", CPU_REFUSAL)]
    record_namespace(namespace_view(project.namespace, refusals=refused, quota=used))
    assert "web-7d9" in _page(client, project)  # the CPU wait's banner
    record_namespace(namespace_view(project.namespace, quota=used))
    assert "web-7d9" not in _page(client, project)


def test_a_warm_view_reads_fewer_rows_and_another_project_is_not_served_them(world, client_of):
    client = client_of(world.member)
    project = world.project_a
    figures.changed(project.pk)
    _page(client, project)  # the session's first view may write it
    figures.changed(project.pk)
    with CaptureQueriesContext(connection) as cold:
        _page(client, project)
    with CaptureQueriesContext(connection) as warm:
        _page(client, project)
    assert len(warm.captured_queries) < len(cold.captured_queries)
    outsider = client_of(world.outsider)
    assert outsider.get(reverse("quota", args=[project.pk])).status_code == 404


def test_a_value_computed_before_a_write_committed_is_never_served_after_it(world):
    project = world.project_a
    figures.changed(project.pk)

    def computed_while_a_writer_commits() -> str:
        figures.changed(project.pk)  # the write lands between the read and the store
        return "read before the write"

    assert figures.cached(project, "race", computed_while_a_writer_commits) == (
        "read before the write"
    )
    assert figures.cached(project, "race", lambda: "read after the write") == (
        "read after the write"
    )
    assert figures.cached(project, "race", lambda: "not computed") == "read after the write"


def test_a_project_id_handed_out_again_never_meets_the_old_projects_figures(world):
    project = world.project_a
    figures.changed(project.pk)
    assert figures.cached(project, "born", lambda: "first project") == "first project"
    project.created_at = project.created_at.replace(year=project.created_at.year + 1)
    assert figures.cached(project, "born", lambda: "same id, new project") == (
        "same id, new project"
    )
