"""`python -m portal.serve` for real: N processes answer on one port and a stop ends them all."""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import subprocess
import sys
from pathlib import Path

from portal import serve
from tests.helpers.wait import wait_for

REPO = Path(__file__).resolve().parents[3]


def _children(pid: int) -> list[int]:
    """The server processes `pid` started (any of its threads; not multiprocessing's tracker)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
                if b"spawn_main" in cmdline and _alive(int(child)):
                    found.append(int(child))
    return sorted(found)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _healthz(port: int) -> int | None:
    with contextlib.suppress(OSError):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/healthz")
        return conn.getresponse().status
    return None


def test_two_processes_serve_one_port_replace_a_dead_one_and_stop_together(tmp_path):
    from tests.helpers.portal import free_port

    port = free_port()
    prom = tmp_path / "prom"
    prom.mkdir()
    (prom / "gauge_all_1.db").write_bytes(b"stale")
    env = {**os.environ, "TRANCHE_DEBUG": "1", "PYTHONPATH": str(REPO),
           "PROMETHEUS_MULTIPROC_DIR": str(prom)}  # fmt: skip
    log = tmp_path / "portal.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, *serve.argv(port, processes=2)], cwd=REPO, env=env, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        wait_for(lambda: _healthz(port) == 200, 60, "the portal's /healthz",
                 lambda: log.read_text()[-2000:])  # fmt: skip
        assert not (prom / "gauge_all_1.db").exists(), "a previous run's metrics file was kept"
        workers = wait_for(lambda: (c := _children(proc.pid)) and len(c) == 2 and c, 30,
                           "two server processes")  # fmt: skip
        os.kill(workers[0], signal.SIGKILL)
        wait_for(lambda: len(c := _children(proc.pid)) == 2 and workers[0] not in c and c, 60,
                 "the dead process to be replaced", lambda: log.read_text()[-2000:])  # fmt: skip
        assert _healthz(port) == 200
        survivors = _children(proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    wait_for(lambda: not any(_alive(p) for p in survivors), 15, "every server process to end")
