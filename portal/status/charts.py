"""The live page's chart data: the last 24 h of GPU memory used against the slice's limit and
compute used against its target, for the project and each pod, as numbers the page's script
draws with the vendored uPlot (`portal/static/vendor/uplot`, see its README) and extends live
from the socket's rows. The last hour is per minute (a new pod shows its first minutes), older
history in 15-minute buckets (the highest memory and the mean compute of each). The project's
limit and target never exceed what its plan allows at once: two pods that replaced each other
within one minute both report in it, though the quota let them hold one slice between them.

`live_charts` reads them with three queries whatever the number of pods, and keeps them per
portal process (the default cache) until the project's history gains a newer minute or the wall
clock enters the next minute: history is stored per minute, so a page shows what it would have,
and 50 viewers reloading it cost one index lookup each instead of aggregating a day of rows
each time."""

from __future__ import annotations

import time
from dataclasses import replace

from django.core.cache import cache

from portal.agents.history import Point, latest_minute, pod_series, series
from portal.orders.models import Subscription

MIB = 1024 * 1024
PODS_CHARTED = 20


def chart_series(points: list[Point]) -> dict[str, list[float]]:
    """Column arrays for uPlot: t (epoch s), memory used and limit (MiB), compute used and
    target (%)."""
    return {
        "t": [int(p.start.timestamp()) for p in points],
        "memory_used": [round(p.memory_used_bytes / MIB, 1) for p in points],
        "memory_limit": [round(p.memory_limit_bytes / MIB, 1) for p in points],
        "compute_used": [round(p.compute_used_percent, 1) for p in points],
        "compute_target": [round(p.compute_target_percent, 1) for p in points],
    }


def within_plan(points: list[Point], project_id: int) -> list[Point]:
    """The project's points with limit and target at most the plan's: slices x the product's
    memory and compute, summed (unchanged for a project without a plan: nothing to bound by)."""
    subs = Subscription.objects.filter(project_id=project_id, quantity__gt=0)
    plan = [(s.quantity, s.product.memory_mib, s.product.compute_percent)
            for s in subs.select_related("product")]  # fmt: skip
    if not plan:
        return points
    memory = sum(n * mib for n, mib, _ in plan) * MIB
    compute = sum(n * percent for n, _, percent in plan)
    return [
        replace(p, memory_limit_bytes=min(p.memory_limit_bytes, memory),
                compute_target_percent=min(p.compute_target_percent, compute))
        for p in points
    ]  # fmt: skip


def _read(project_id: int) -> dict:
    pods = pod_series(project_id, limit=PODS_CHARTED)
    return {
        "project": chart_series(within_plan(series(project_id), project_id)),
        "pods": {pod: chart_series(points) for pod, points in pods.items() if points},
    }


def live_charts(project_id: int) -> dict:
    """{"project": series, "pods": {pod: series}} (the first 20 pods with history, by name);
    see the module docstring for the cache."""
    newest = latest_minute(project_id)
    key = f"status.charts.v3:{project_id}:{newest and newest.timestamp()}:{int(time.time() // 60)}"
    found = cache.get(key)
    if found is None:
        found = _read(project_id)
        cache.set(key, found, 120)
    return found
