"""The quota page and the live status page cost a fixed number of queries, however many pods,
orders, claims and history rows the project has (issue #18: 50 viewers at fleet size), and a
page view writes nothing (no session UPDATE per request)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from portal.agents.models import PodMinute, PodSliceStatus
from portal.cluster.models import PodState, ProjectUsage, UsageRecord
from portal.orders.models import Order, Subscription

GIB = 1024**3
QUOTA_QUERIES = 3  # session, user, the tenant frame (one statement); the figures: Redis
STATUS_QUERIES = 12  # session, user, project, pods, cluster rows, 3 charts, 2 nav, nodes seen,
# GPU incidents


def _grow(world, first: int, count: int) -> None:
    """`count` more pods (agent status, cluster view, an hour of history, a ledger entry each)
    and as many orders, some still open, on two products."""
    project, now = world.project_a, timezone.now()
    products = list(world.products.values())[:2]
    subs = [
        Subscription.objects.get_or_create(project=project, product=p, defaults={"quantity": 8})[0]
        for p in products
    ]
    for p in products:
        ProjectUsage.objects.get_or_create(project=project, product=p, defaults={"allocated": 8})
    names = [f"train-{k}" for k in range(first, first + count)]
    PodSliceStatus.objects.bulk_create(
        PodSliceStatus(project=project, node_name="kwok-gpu-0", namespace=project.namespace,
                       pod_name=n, pod_uid=f"u-{n}", gpu_uuid="GPU-1", memory_limit_bytes=8 * GIB,
                       memory_used_bytes=GIB, rejected_allocations=0, compute_target_percent=25,
                       compute_used_percent=20.0, throttled_seconds=0.0, processes=1,
                       reported_at=now)
        for n in names
    )  # fmt: skip
    PodState.objects.bulk_create(
        PodState(project=project, namespace=project.namespace, name=n, phase="Running",
                 reason="running", words="Running.")
        for n in names
    )  # fmt: skip
    PodMinute.objects.bulk_create(
        PodMinute(project=project, namespace=project.namespace, pod_name=n,
                  minute=now.replace(second=0, microsecond=0) - timedelta(minutes=m),
                  memory_used_max_bytes=GIB, memory_limit_bytes=8 * GIB, compute_used_sum=60.0,
                  compute_target_percent=25, samples=3)
        for n in names
        for m in range(60)
    )  # fmt: skip
    Order.objects.bulk_create(
        Order(organization=world.org_a, project=project, product=subs[k % 2].product,
              subscription=subs[k % 2], kind="resize", from_quantity=1, quantity=2,
              state="pending" if k % 3 == 0 else "active", idempotency_key=f"k-{first}-{k}",
              unit_monthly_price=Decimal(90), monthly_total=Decimal(180),
              prorata_charge=Decimal(1), currency="EUR", placed_by=world.owner)
        for k in range(count)
    )  # fmt: skip
    UsageRecord.objects.bulk_create(
        UsageRecord(claim_uid=f"c-{n}", claim_name=n, organization=world.org_a, project=project,
                    product=subs[0].product, node="kwok-gpu-0", allocated_at=now,
                    opened_by="event")
        for n in names
    )  # fmt: skip


def _queries(client, url: str) -> list[str]:
    cache.clear()  # the charts' cache: count what a page costs when it has to draw them
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200
    return [q["sql"] for q in ctx.captured_queries]


@pytest.mark.parametrize("page", ["quota", "project_status"])
def test_page_queries_do_not_grow_with_pods_orders_and_claims(world, client_of, page):
    client = client_of(world.member)
    url = reverse(page, args=[world.project_a.pk])
    _grow(world, 0, 1)
    client.get(url)  # the first view may store the chosen project in the session
    small = _queries(client, url)
    _grow(world, 1, 40)
    large = _queries(client, url)
    assert len(large) == len(small), "\n".join(large)
    assert len(large) <= (QUOTA_QUERIES if page == "quota" else STATUS_QUERIES), "\n".join(large)
    writes = [q for q in large if q.lstrip().split(" ", 1)[0] in ("INSERT", "UPDATE", "DELETE")]
    assert writes == []
    if page == "project_status":
        body = client.get(url).content.decode()
        assert body.count('class="pod-chart"') == 20  # the first 20 pods by name are charted
        assert body.count("<tr data-key=") == 2 * 41  # every pod in both tables


def test_live_page_redraws_its_charts_when_history_gains_a_minute(world, client_of):
    """The charts are kept per process until a newer minute arrives: a pod's first minute of
    history shows on the next page view, not a minute later."""
    client = client_of(world.member)
    url = reverse("project_status", args=[world.project_a.pk])
    assert 'id="no-history"' in client.get(url).content.decode()
    _grow(world, 0, 1)
    assert 'data-pod="train-0"' in client.get(url).content.decode()
