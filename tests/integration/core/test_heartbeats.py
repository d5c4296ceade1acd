"""/readyz names a stale process heartbeat (worker, beat, watcher) and silent node agents."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from portal.agents.models import NodeToken
from portal.core import heartbeats
from portal.core.models import WorkerHeartbeat

pytestmark = pytest.mark.django_db


def _seen(name: str, role: str, ago: timedelta) -> None:
    WorkerHeartbeat.objects.update_or_create(
        worker=name, defaults={"role": role, "seen_at": timezone.now() - ago}
    )


def test_readyz_names_a_stale_watcher(client, settings) -> None:
    settings.TRANCHE_HEARTBEAT_SECONDS = 10
    for role in ("worker", "beat", "watcher"):
        _seen(f"{role}@host", role, timedelta(seconds=1))
    assert client.get("/readyz").status_code == 200

    _seen("watcher@host", "watcher", timedelta(seconds=31))  # 3 periods + 1 s
    resp = client.get("/readyz")
    assert resp.status_code == 503
    body = resp.json()
    assert body["checks"]["processes"]["ok"] is False
    # only the watcher is named (worker and beat are fresh)
    assert re.fullmatch(r"stale heartbeat: watcher \(last heartbeat 3\ds ago\)", body["message"])


def test_the_portal_scope_ignores_other_processes_heartbeats(client, settings) -> None:
    """The chart's readiness probe: a stale watcher leaves the portal serving pages."""
    settings.TRANCHE_HEARTBEAT_SECONDS = 10
    for role in ("worker", "beat"):
        _seen(f"{role}@host", role, timedelta(seconds=1))
    _seen("watcher@host", "watcher", timedelta(seconds=31))
    assert client.get("/readyz").status_code == 503
    resp = client.get("/readyz?scope=portal")
    assert resp.status_code == 200
    assert set(resp.json()["checks"]) == {"database", "redis"}


def test_the_newest_process_of_a_role_counts(client, settings) -> None:
    """A replaced watcher (new host name) leaves an old row behind; the new one is fresh."""
    settings.TRANCHE_HEARTBEAT_SECONDS = 10
    _seen("watcher@old", "watcher", timedelta(hours=2))
    _seen("watcher@new", "watcher", timedelta(seconds=1))
    assert client.get("/readyz").json()["checks"]["processes"]["ok"] is True


def test_silent_agents_are_named_but_do_not_fail_readiness(client, settings) -> None:
    settings.TRANCHE_HEARTBEAT_SECONDS = 10
    NodeToken.objects.create(
        node_name="gpu-7", token_hash="0" * 64, token_prefix="x",
        last_seen_at=timezone.now() - timedelta(minutes=5),
    )  # fmt: skip
    resp = client.get("/readyz")
    assert resp.status_code == 200
    assert "node agents silent: gpu-7" in resp.json()["checks"]["processes"]["message"]


def test_beat_writes_at_most_once_per_period(settings) -> None:
    settings.TRANCHE_HEARTBEAT_SECONDS = 60
    assert heartbeats.beat("watcher", "watcher@unit") is True
    assert heartbeats.beat("watcher", "watcher@unit") is False
    row = WorkerHeartbeat.objects.get(worker="watcher@unit")
    assert (row.role, row.beats) == ("watcher", 1)
