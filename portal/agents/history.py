"""Bounded history of each pod's slice figures: one row per pod and minute, 24 h kept.

`record_samples` folds any number of agent samples into per-minute rows with one upsert per
(pod, minute): memory is the minute's maximum, compute the mean, so a 1 s agent interval and a
10 s one give the same chart. Rows older than `RETENTION` are deleted as new minutes arrive, so
storage is at most 1440 rows per live pod. `series` downsamples to `points` buckets in SQL for
the charts, with one bucket per minute over the last hour. The project's series sums the pods
of each minute first, then takes the bucket's highest sum: pods that followed each other in a
bucket (a rollout, a check pod then the workload) held their slices one after another, and
summing each pod's own maximum showed a one-slice plan's "limit" as three slices.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.utils import timezone

from portal.agents.models import PodMinute

RETENTION = timedelta(hours=24)
PRUNE_EVERY_SECONDS = 60.0
_last_prune = 0.0


@dataclass(frozen=True)
class Sample:
    """One agent report of one pod."""

    project_id: int
    namespace: str
    pod: str
    ts: float
    memory_used_bytes: int
    memory_limit_bytes: int
    compute_used_percent: float
    compute_target_percent: int


@dataclass(frozen=True)
class Point:
    """One chart bucket: start, max memory used, memory limit, mean compute used, target."""

    start: datetime
    memory_used_bytes: int
    memory_limit_bytes: int
    compute_used_percent: float
    compute_target_percent: float


# One statement for a whole message (a row per pod and minute, unique within it): 32 statements
# per node frame were most of the ingest's PostgreSQL time at fleet size.
_UPSERT = """
INSERT INTO agents_podminute AS m
    (project_id, namespace, pod_name, minute, memory_used_max_bytes, memory_limit_bytes,
     compute_used_sum, compute_target_percent, samples)
SELECT * FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::timestamptz[], %s::bigint[],
                     %s::bigint[], %s::float8[], %s::int[], %s::int[])
ON CONFLICT (namespace, pod_name, minute) DO UPDATE SET
    memory_used_max_bytes = GREATEST(m.memory_used_max_bytes, EXCLUDED.memory_used_max_bytes),
    memory_limit_bytes = EXCLUDED.memory_limit_bytes,
    compute_used_sum = m.compute_used_sum + EXCLUDED.compute_used_sum,
    compute_target_percent = EXCLUDED.compute_target_percent,
    samples = m.samples + EXCLUDED.samples
"""


def record_samples(samples: list[Sample], now: datetime | None = None) -> int:
    """Fold samples into per-minute rows; returns the rows upserted."""
    minutes: dict[tuple[str, str, int], list] = {}
    for s in samples:
        key = (s.namespace, s.pod, int(s.ts // 60) * 60)
        row = minutes.get(key)
        if row is None:
            minutes[key] = [s.project_id, s.memory_used_bytes, s.memory_limit_bytes,
                            s.compute_used_percent, s.compute_target_percent, 1]  # fmt: skip
        else:
            row[1] = max(row[1], s.memory_used_bytes)
            row[2], row[4] = s.memory_limit_bytes, s.compute_target_percent
            row[3] += s.compute_used_percent
            row[5] += 1
    params = [
        (r[0], ns, pod, datetime.fromtimestamp(minute, tz=UTC), r[1], r[2], r[3], r[4], r[5])
        for (ns, pod, minute), r in minutes.items()
    ]
    if params:
        with connection.cursor() as cursor:
            cursor.execute(_UPSERT, [list(column) for column in zip(*params, strict=True)])
    prune(now)
    return len(params)


def prune(now: datetime | None = None, force: bool = False) -> int:
    """Delete rows older than RETENTION (at most once a minute per process unless forced)."""
    global _last_prune  # noqa: PLW0603 - a per-process rate limit, nothing else shares it
    if not force and time.monotonic() - _last_prune < PRUNE_EVERY_SECONDS:
        return 0
    _last_prune = time.monotonic()
    cutoff = (now or timezone.now()) - RETENTION
    deleted, _ = PodMinute.objects.filter(minute__lt=cutoff).delete()
    return deleted


# A chart bucket's start (epoch seconds): each minute of the last FINE_WINDOW is its own bucket,
# so a new pod shows its first minutes; older minutes fall into `width`-second buckets.
_BUCKET = """CASE WHEN minute >= %s THEN extract(epoch FROM minute)
    ELSE extract(epoch FROM %s::timestamptz)
         + floor(extract(epoch FROM minute - %s::timestamptz) / %s) * %s END"""
FINE_WINDOW = timedelta(hours=1)
_SERIES_POD = f"""
    SELECT {_BUCKET} AS bucket,
           max(memory_used_max_bytes), max(memory_limit_bytes),
           sum(compute_used_sum) / sum(samples), avg(compute_target_percent)
    FROM agents_podminute
    WHERE project_id = %s AND minute >= %s AND pod_name = %s
    GROUP BY 1 ORDER BY 1"""  # noqa: S608 - the fixed _BUCKET text; values are parameters
# Each minute's pods summed (what was held at once), then per bucket: the highest memory used
# and limit and compute target of any minute, and the mean compute used over its minutes.
_SERIES_PROJECT = f"""
    WITH per_minute AS (
        SELECT minute, sum(memory_used_max_bytes) AS mem, sum(memory_limit_bytes) AS lim,
               sum(compute_used_sum / samples) AS used, sum(compute_target_percent) AS target
        FROM agents_podminute
        WHERE project_id = %s AND minute >= %s
        GROUP BY minute)
    SELECT {_BUCKET} AS bucket, max(mem), max(lim), avg(used), max(target)
    FROM per_minute GROUP BY 1 ORDER BY 1"""  # noqa: S608 - as above


def _bucket_args(now: datetime, points: int) -> tuple[datetime, list]:
    start = now - RETENTION
    width = int(RETENTION.total_seconds() // points)
    return start, [now - FINE_WINDOW, start, start, width, width]


def _point(bucket, mem, lim, used, target) -> Point:
    start = datetime.fromtimestamp(float(bucket), tz=UTC)
    return Point(start, int(mem), int(lim), float(used), float(target))


def series(
    project_id: int, pod: str | None = None, points: int = 96, now: datetime | None = None
) -> list[Point]:
    """The last 24 h: one pod's, or the project's (each minute's pods summed, see the module
    docstring); per minute over the last FINE_WINDOW, in 24 h / `points` buckets before it."""
    start, buckets = _bucket_args(now or timezone.now(), points)
    if pod:
        sql, args = _SERIES_POD, [*buckets, project_id, start, pod]
    else:
        sql, args = _SERIES_PROJECT, [project_id, start, *buckets]
    with connection.cursor() as cursor:
        cursor.execute(sql, args)
        rows = cursor.fetchall()
    return [_point(*row) for row in rows]


# Built from the fixed _BUCKET text only; every value is a bound parameter.
_POD_SERIES = f"""
    WITH pods AS (
        SELECT DISTINCT pod_name FROM agents_podminute
        WHERE project_id = %s AND minute >= %s ORDER BY pod_name LIMIT %s)
    SELECT pod_name, {_BUCKET} AS bucket,
           max(memory_used_max_bytes), max(memory_limit_bytes),
           sum(compute_used_sum) / sum(samples), avg(compute_target_percent)
    FROM agents_podminute
    WHERE project_id = %s AND minute >= %s AND pod_name IN (SELECT pod_name FROM pods)
    GROUP BY 1, 2 ORDER BY 1, 2"""  # noqa: S608


def pod_series(
    project_id: int, limit: int = 20, points: int = 96, now: datetime | None = None
) -> dict[str, list[Point]]:
    """`series` of each of the project's first `limit` pods (by name) with rows in the last
    24 h, in one query: the live page's cost does not grow with the pods it charts."""
    start, buckets = _bucket_args(now or timezone.now(), points)
    with connection.cursor() as cursor:
        cursor.execute(_POD_SERIES, [project_id, start, limit, *buckets, project_id, start])
        rows = cursor.fetchall()
    found: dict[str, list[Point]] = {}
    for pod, *values in rows:
        found.setdefault(pod, []).append(_point(*values))
    return found


def latest_minute(project_id: int) -> datetime | None:
    """The newest minute with a row of the project (an index lookup), None without history."""
    newest = PodMinute.objects.filter(project_id=project_id).order_by("-minute")
    return newest.values_list("minute", flat=True).first()
