"""The slice agent the metrics tests run (`tests/helpers/slice_agent.py`) takes its workloads
with it when it is stopped: they burn at nice -10, and left running they took the CPU from the
tests after it for up to the agent's whole SECONDS."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

from tests.helpers.portal import REPO
from tests.helpers.wait import wait_for


def _burns(tag: str) -> list[int]:
    """Pids of `burn` workloads whose run time argument is `tag`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"/burn") and tag.encode() in argv:
            found.append(int(proc.name))
    return found


def test_a_terminated_slice_agent_stops_its_workloads(tmp_path):
    tag = f"{300 + secrets.randbelow(1000) / 1000:.3f}"  # this run's workloads, by argument
    env = dict(os.environ, PYTHONPATH=str(REPO))
    agent = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.slice_agent", str(tmp_path), "0", tag, "a:25:2"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for(lambda: len(_burns(tag)) == 2, 60, "the slice's two workloads running")
        agent.terminate()
        agent.wait(timeout=20)
        wait_for(lambda: not _burns(tag), 5, lambda: f"workloads left: {_burns(tag)}")
    finally:
        agent.kill()
        for pid in _burns(tag):
            os.kill(pid, 9)
