"""Pod history: agent samples fold into one row per pod and minute (max memory, mean compute),
rows older than 24 h are pruned, the charts' series is downsampled in SQL, and the live page
draws it as inline SVG."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.urls import reverse

from portal.agents import history
from portal.agents.models import PodMinute
from tests.helpers.factories import make_world

pytestmark = pytest.mark.django_db(transaction=True)
GIB = 1024**3
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _samples(project_id: int, pod: str, start: datetime, seconds: int) -> list[history.Sample]:
    t0 = start.timestamp()
    return [
        history.Sample(project_id, "ns-a", pod, t0 + i, (i % 60) * GIB // 60, 8 * GIB,
                       20.0 if i % 2 else 30.0, 25)
        for i in range(seconds)
    ]  # fmt: skip


def test_samples_fold_per_minute_and_old_rows_go():
    world = make_world()
    pid = world.project_a.pk
    written = history.record_samples(_samples(pid, "train", NOW - timedelta(hours=2), 7200), NOW)
    assert written == 120
    assert PodMinute.objects.filter(pod_name="train").count() == 120
    row = PodMinute.objects.filter(pod_name="train").order_by("minute").first()
    assert row.samples == 60
    assert row.memory_used_max_bytes == 59 * GIB // 60
    assert row.compute_used_sum / row.samples == pytest.approx(25.0)
    # the same minute reported again in two halves still gives one row
    again = _samples(pid, "train", NOW - timedelta(hours=2), 30)
    history.record_samples(again, NOW)
    assert PodMinute.objects.filter(pod_name="train").count() == 120
    history.record_samples(_samples(pid, "old", NOW - timedelta(hours=30), 120), NOW)
    assert history.prune(NOW, force=True) == 2
    assert not PodMinute.objects.filter(pod_name="old").exists()
    points = history.series(pid, "train", points=96, now=NOW)
    assert 0 < len(points) <= 96
    assert max(p.memory_used_bytes for p in points) == 59 * GIB // 60
    assert all(p.memory_limit_bytes == 8 * GIB for p in points)


def test_live_page_carries_the_chart_data():
    """The page carries each series as numbers for its charts (drawn by uPlot in the browser,
    tests/browser/test_history_chart.py): the last hour per minute, a pod with history but no
    agent row folded under "Pods no longer reported"."""
    import json
    import re

    world = make_world()
    pid = world.project_a.pk
    now = datetime.now(tz=UTC)
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=30)  # ten whole minutes
    history.record_samples(_samples(pid, "train", start, 600), now)
    client = Client()
    client.force_login(world.member)
    page = client.get(reverse("project_status", args=[pid])).content.decode()
    found = re.search(r'<script id="chart-data" type="application/json">(.*?)</script>', page)
    data = json.loads(found.group(1))
    train = data["pods"]["train"]
    assert len(train["t"]) == 10  # ten minutes of samples, one point each
    assert [b - a for a, b in zip(train["t"], train["t"][1:], strict=False)] == [60] * 9
    assert max(train["memory_used"]) == round(59 * GIB // 60 / 2**20, 1)
    assert set(train["memory_limit"]) == {8192.0}
    assert set(train["compute_target"]) == {25.0}
    assert data["project"]["t"] == train["t"]
    gone = page[page.index('id="gone-charts"') :]
    assert 'data-pod="train"' in gone  # no agent reports it now
    assert 'id="gone-count">1<' in page


def _plan(project, device_class: str, quantity: int) -> None:
    from portal.catalog.models import Product
    from portal.orders.models import Subscription

    product = Product.objects.get(device_class=device_class)
    Subscription.objects.create(project=project, product=product, quantity=quantity)


def test_a_one_slice_plan_charts_one_slices_limit_through_rollouts():
    """Issue #49: pods that followed each other (a check pod, the workload, its Recreate
    rollouts) summed to a 24 GiB "slice limit" on a one-slice plan. A coarse bucket takes the
    highest sum of any one minute; a minute two pods shared at a hand-over is bounded by the plan.
    """
    from portal.status.charts import within_plan

    world = make_world()
    project = world.project_a
    _plan(project, "tranche-v100-8g", 1)
    pid = project.pk
    handover = NOW - timedelta(minutes=10) + timedelta(seconds=30)
    for pod, start, end in [
        ("slice-check", NOW - timedelta(hours=3), NOW - timedelta(hours=2, minutes=50)),
        ("llm-1", NOW - timedelta(hours=2, minutes=50), NOW - timedelta(hours=2, minutes=30)),
        ("llm-2", NOW - timedelta(minutes=30), handover),
        ("llm-3", handover, NOW),
    ]:
        history.record_samples(_samples(pid, pod, start, int((end - start).total_seconds())), NOW)

    raw = history.series(pid, points=96, now=NOW)
    coarse = [p for p in raw if p.start < NOW - history.FINE_WINDOW]
    assert coarse
    assert {p.memory_limit_bytes for p in coarse} == {8 * GIB}  # 16 GiB on 083f417
    assert {p.compute_target_percent for p in coarse} == {25}
    shared = [p for p in raw if p.start == handover.replace(second=0)]
    assert shared[0].memory_limit_bytes == 16 * GIB  # both pods reported in that minute

    charted = within_plan(raw, pid)
    assert max(p.memory_limit_bytes for p in charted) == 8 * GIB
    assert max(p.compute_target_percent for p in charted) == 25
    assert [p.start for p in charted] == [p.start for p in raw]


def test_pods_that_run_at_once_sum_within_a_two_slice_plan():
    world = make_world()
    project = world.project_a
    _plan(project, "tranche-v100-8g", 2)
    pid = project.pk
    for pod in ("a", "b"):
        history.record_samples(_samples(pid, pod, NOW - timedelta(hours=2), 1800), NOW)
    from portal.status.charts import within_plan

    charted = within_plan(history.series(pid, points=96, now=NOW), pid)
    assert {p.memory_limit_bytes for p in charted} == {16 * GIB}
    assert {p.compute_target_percent for p in charted} == {50}
    assert max(p.memory_used_bytes for p in charted) == 2 * (59 * GIB // 60)
