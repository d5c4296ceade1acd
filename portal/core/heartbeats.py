"""Heartbeats of the long-running processes, and which of them are stale.

Writers: the Celery worker (beat's `portal.core.record_heartbeat` task: proves broker and
database end to end), Celery beat (`start_beat_heartbeat`, a thread of the beat process) and the
watcher (its flusher, through `beat`). Node agents need no row: every report they send updates
`NodeToken.last_seen_at`, which the agents app reports through `INFORMATIONAL_CHECKS`. A role is
stale when its newest row is older than three heartbeat periods; a role never seen is reported
as such but does not fail readiness, so a fresh install is ready before its first beat.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, connections
from django.db.models import Max
from django.utils import timezone

from portal.core.models import WorkerHeartbeat
from portal.core.services import record_heartbeat

log = logging.getLogger("portal.core.heartbeats")
WORKER, BEAT, WATCHER = (
    WorkerHeartbeat.Role.WORKER,
    WorkerHeartbeat.Role.BEAT,
    WorkerHeartbeat.Role.WATCHER,
)
_last_beat: dict[str, float] = {}


def period() -> float:
    return float(settings.TRANCHE_HEARTBEAT_SECONDS)


def stale_after() -> timedelta:
    return timedelta(seconds=3 * period())


def beat(role: str, process: str) -> bool:
    """Record a heartbeat of `process` at most once per period (cheap to call every loop);
    True when a row was written. Database errors propagate to the caller's retry loop."""
    now = time.monotonic()
    if now - _last_beat.get(process, float("-inf")) < period():
        return False
    record_heartbeat(process, role)
    _last_beat[process] = now
    return True


def newest_by_role() -> dict[str, datetime]:
    rows = WorkerHeartbeat.objects.values("role").annotate(newest=Max("seen_at"))
    return {row["role"]: row["newest"] for row in rows}


# Apps above core add what they know of other processes' liveness (e.g. the agents app: node
# agents that stopped reporting). Each takes the staleness cutoff and returns a line, or "".
# Informational: they never fail readiness.
INFORMATIONAL_CHECKS: list[Callable[[datetime], str]] = []


def check_processes() -> tuple[bool, str]:
    """(ok, message) for /readyz: ok unless a worker, beat or watcher heartbeat is stale."""
    newest = newest_by_role()
    cutoff = timezone.now() - stale_after()
    stale, unseen = [], []
    for role in (WORKER, BEAT, WATCHER):
        seen = newest.get(role)
        if seen is None:
            unseen.append(role)
        elif seen < cutoff:
            age = (timezone.now() - seen).total_seconds()
            stale.append(f"{role} (last heartbeat {age:.0f}s ago)")
    parts = []
    if stale:
        parts.append("stale heartbeat: " + ", ".join(stale))
    if unseen:
        parts.append("no heartbeat yet: " + ", ".join(unseen))
    parts += [line for check in INFORMATIONAL_CHECKS if (line := check(cutoff))]
    return not stale, "; ".join(parts) or "worker, beat and watcher heartbeats fresh"


def start_beat_heartbeat(process: str) -> threading.Thread:
    """A daemon thread of the beat process writing its heartbeat every period; it survives a
    database outage (errors are logged and retried next period)."""

    def loop() -> None:
        while True:
            try:
                beat(BEAT, process)
            except DatabaseError as exc:
                log.warning("beat heartbeat not written (%s); retrying", exc)
                connections.close_all()
            time.sleep(period() / 3)

    thread = threading.Thread(target=loop, name="beat-heartbeat", daemon=True)
    thread.start()
    return thread
