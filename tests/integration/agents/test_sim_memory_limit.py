"""Kubelet-lite enforces a container's RAM limit with the kernel's memory cgroup: a workload
filling 1 GiB of host RAM under a 512Mi limit is killed by the OOM killer (SIGKILL, which the
kubelet reports as OOMKilled, exit code 137); under the limit nothing is killed."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from nodeagent.sim import cgroups
from nodeagent.sim.cgroups import MemoryCgroup
from nodeagent.sim.kubeletlite import launch_script

ROOT = Path(__file__).resolve().parents[3]
MIB = 1024 * 1024
pytestmark = pytest.mark.skipif(
    cgroups.version() is None or os.geteuid() != 0,
    reason="needs a writable memory cgroup (v1 or v2) and root, as kubelet-lite does",
)


def _run(fill_mib: int, limit: int) -> tuple[int, int, list[dict]]:
    group = MemoryCgroup(f"test-{secrets.token_hex(4)}", limit)
    try:
        command = [sys.executable, "-m", "nodeagent.sim.workload", "--duty", "0",
                   "--seconds", "0.1", "--host-memory-mib", str(fill_mib)]  # fmt: skip
        proc = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             launch_script([], command, group.procs)],
            env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)},
            capture_output=True, timeout=60, check=False,
        )  # fmt: skip
        lines = [json.loads(x) for x in proc.stdout.decode().splitlines() if x.startswith("{")]
        return proc.returncode, group.oom_kills(), lines
    finally:
        group.remove()


def test_filling_1gib_under_512mi_is_oom_killed():
    code, kills, lines = _run(1024, 512 * MIB)
    assert kills == 1, (code, lines[-3:])
    assert code in (-9, 137), code  # SIGKILL: the kubelet reports 128 + 9
    filled = max(e["total_mib"] for e in lines if e.get("event") == "host-alloc")
    assert filled < 512, f"the workload held {filled} MiB past its 512Mi limit"


def test_staying_under_the_limit_is_not_killed():
    _code, kills, lines = _run(128, 512 * MIB)
    assert kills == 0
    assert max(e["total_mib"] for e in lines if e.get("event") == "host-alloc") == 128
