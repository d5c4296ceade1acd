"""Small server-rendered SVG charts of the last 24 h (no script, no library): GPU memory used
against the slice's limit, and compute used against its target, for a project or one pod.

`live_charts` draws the live page's charts with two queries whatever the number of pods, and
keeps them per portal process (the default cache) until the project's history gains a newer
minute or the wall clock enters the next minute: history is stored per minute and the charts
are not redrawn live, so a page shows what it would have, and 50 viewers reloading it cost
one index lookup each instead of aggregating a day of rows each time."""

from __future__ import annotations

import time
from datetime import datetime

from django.core.cache import cache
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from portal.agents.history import RETENTION, Point, latest_minute, pod_series, series

WIDTH, HEIGHT = 240, 48


def _polyline(xs: list[float], ys: list[float], top: float, css: str) -> str:
    span = RETENTION.total_seconds()
    points = " ".join(
        f"{WIDTH * x / span:.1f},{HEIGHT - HEIGHT * min(y, top) / top:.1f}"
        for x, y in zip(xs, ys, strict=True)
    )
    return f'<polyline class="{css}" fill="none" points="{points}"/>'


def chart(points: list[Point], label: str, now: datetime | None = None) -> SafeString:
    """Two small SVGs (memory, compute): the used line over the limit/target line."""
    if not points:
        return mark_safe("")
    origin = (now or timezone.now()) - RETENTION
    xs = [(p.start - origin).total_seconds() for p in points]
    memory = (
        "GPU memory used / limit",
        [p.memory_used_bytes for p in points],
        [p.memory_limit_bytes for p in points],
    )
    compute = (
        "Compute used / target",
        [p.compute_used_percent for p in points],
        [p.compute_target_percent for p in points],
    )
    svgs = []
    for title, used, limit in (memory, compute):
        top = max(*limit, *used, 1)
        # Built from numbers and fixed class names only: nothing from a user reaches it.
        lines = mark_safe(_polyline(xs, limit, top, "limit") + _polyline(xs, used, top, "used"))  # noqa: S308
        svgs.append(
            format_html(
                '<svg class="chart" role="img" width="{}" height="{}" viewBox="0 0 {} {}">'
                "<title>{}: {}, last 24 h</title>{}</svg>",
                WIDTH,
                HEIGHT,
                WIDTH,
                HEIGHT,
                label,
                title,
                lines,
            )
        )
    return mark_safe("".join(svgs))  # noqa: S308 - each part escaped by format_html


def project_chart(project_id: int) -> SafeString:
    return chart(series(project_id), "Project")


def pod_charts(project_id: int) -> list[tuple[str, SafeString]]:
    """Charts of the pods with history (the first 20 by name)."""
    return [(pod, chart(points, pod)) for pod, points in pod_series(project_id).items() if points]


def live_charts(project_id: int) -> tuple[SafeString, list[tuple[str, SafeString]]]:
    """(project chart, pod charts) of the live page; see the module docstring for the cache."""
    newest = latest_minute(project_id)
    key = f"status.charts:{project_id}:{newest and newest.timestamp()}:{int(time.time() // 60)}"
    found = cache.get(key)
    if found is None:
        found = (project_chart(project_id), pod_charts(project_id))
        cache.set(key, found, 120)
    return found
