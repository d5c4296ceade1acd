"""Leader election behind the chart (installed with `watcher.replicas: 2`, `beat.replicas: 2`):
one of each holds its Lease in tranche-system and runs, the other waits. The active watcher is
killed (SIGKILL to its process on the node: a crash, no chance to give the Lease up); the standby
holds the Lease and writes pod states (its flusher's heartbeat row, written after each flush
of the namespaces' pod states) within 15 s. The measured takeover is printed.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from kubernetes import client

from deploy.local import services
from tests.helpers.wait import wait_for
from tests.install.installation import DATABASE, NAMESPACE, Installation

TAKEOVER_SECONDS = 15  # issue #31's bound: the Lease's 8 s expiry, a 1 s retry, the start


def _pods(installation: Installation, component: str) -> list[client.V1Pod]:
    return [
        p
        for p in installation.pods()
        if p.metadata.labels.get("app.kubernetes.io/component") == component
        and p.metadata.deletion_timestamp is None
    ]


def _holder(installation: Installation, lease: str) -> str:
    coord = client.CoordinationV1Api(installation.api)
    try:
        holder = coord.read_namespaced_lease(lease, NAMESPACE).spec.holder_identity or ""
    except client.ApiException:
        return ""
    return holder.split("_")[0]  # the pod; a pod's name has no "_" (controller/leader.identity)


def _heartbeats(role: str) -> dict[str, datetime]:
    """process -> last heartbeat, from the installed copy's database."""
    lay = services.layout()
    dsn = {"host": "127.0.0.1", "port": lay.pg_port, "dbname": DATABASE, "user": "tranche"}
    with psycopg.connect(**dsn, password=services.secret(lay, "db-password")) as conn:
        rows = conn.execute(
            "SELECT worker, seen_at FROM core_workerheartbeat WHERE role = %s", (role,)
        ).fetchall()
    return dict(rows)


def _process_of(pod: str, module: str) -> int:
    """The host PID of the pod's `module` process (the real node's containers are processes of
    this machine; the chart gives each POD_NAME)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if module.encode() in cmdline and f"POD_NAME={pod}".encode() in environ:
            return int(proc.name)
    raise AssertionError(f"no {module} process of pod {pod} on this machine")


def _two_ready(installation: Installation, component: str) -> list[str]:
    wait_for(
        lambda: (
            installation.deployment_ready(component) and len(_pods(installation, component)) == 2
        ),
        180,
        lambda: f"two {component} pods Ready\n" + installation.describe(component),
    )
    return [p.metadata.name for p in _pods(installation, component)]


@pytest.mark.parametrize("component", ["beat", "watcher"])
def test_one_of_two_runs_holding_its_lease(installation: Installation, component: str) -> None:
    lease = f"tranche-{component}"
    names = _two_ready(installation, component)

    def holder() -> str:
        return _holder(installation, lease)

    wait_for(
        lambda: holder() in names, 60, lambda: f"a {component} pod holding {lease}: {holder()!r}"
    )
    leader = holder()
    (standby,) = [n for n in names if n != leader]
    wait_for(lambda: f"{component}@{leader}" in _heartbeats(component), 60,
             lambda: f"{component}@{leader}'s heartbeat ({_heartbeats(component)})")  # fmt: skip
    # Only the holder runs: heartbeat rows name it, never the standby.
    assert f"{component}@{standby}" not in _heartbeats(component), _heartbeats(component)


def test_watcher_leader_killed_the_standby_takes_over_within_15_s(
    installation: Installation,
) -> None:
    names = _two_ready(installation, "watcher")
    wait_for(lambda: _holder(installation, "tranche-watcher") in names, 60, "a watcher leader")
    leader = _holder(installation, "tranche-watcher")
    (standby,) = [n for n in names if n != leader]
    pid = _process_of(leader, "controller.watch")
    killed_at = datetime.now(UTC)
    started = time.monotonic()
    os.kill(pid, signal.SIGKILL)

    def holder() -> str:
        return _holder(installation, "tranche-watcher")

    wait_for(lambda: holder() == standby, 60, lambda: f"{standby} holding the Lease: {holder()!r}")
    lease_at = time.monotonic() - started
    beat = f"watcher@{standby}"
    wait_for(lambda: _heartbeats("watcher").get(beat, killed_at) > killed_at, 60,
             lambda: f"{beat} writing after the kill ({_heartbeats('watcher')})")  # fmt: skip
    writing_at = time.monotonic() - started
    print(f"\nwatcher takeover after SIGKILL of {leader}: Lease held by {standby} "  # noqa: T201
          f"after {lease_at:.1f} s, its first flush after {writing_at:.1f} s")  # fmt: skip
    assert writing_at <= TAKEOVER_SECONDS, (lease_at, writing_at)
