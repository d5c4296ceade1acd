"""The agent's health monitor on simgpu's NVML (real pynvml in this process, faults raised by
SIMULATED `simgpu-fault`): a fatal XID makes its GPU unhealthy and wakes the agent, a GPU that
stops answering is unhealthy too, a recovery clears both; an application XID names the
process from the simulated kernel log and taints nothing; a corrected ECC error is nothing."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from nodeagent.health import HealthMonitor
from nodeagent.xid import Severity
from tests.helpers.gpus import v100
from tests.helpers.skips import SIMGPU_DIR
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.skipif(
    not (SIMGPU_DIR / "simgpu-fault").exists(), reason="needs `make -C nodeagent/native`"
)


def _fault(sim, *args: object) -> None:
    env = dict(os.environ, **{k: v for k, v in sim.items() if k.startswith("SIMGPU")})
    subprocess.run([str(SIMGPU_DIR / "simgpu-fault"), *map(str, args)], env=env, check=True)


def _cause(monitor, gpu):
    held = monitor.unhealthy().get(gpu.uuid)
    return held if held is not None and held.xid is not None else None


def test_faults_become_health_and_recovery_clears_them(sim_nvml):
    gpus = [v100(0), v100(1)]
    woke = threading.Event()
    monitor = HealthMonitor(gpus, on_change=woke.set, check_every=0.2,
                            kernel_log=Path(sim_nvml["SIMGPU_STATE"] + ".kmsg"))  # fmt: skip
    monitor.start()
    try:
        _fault(sim_nvml, "ecc", 0, "single")
        _fault(sim_nvml, "xid", 0, 31, 4242, "python")
        event = wait_for(monitor.take_events, 5, "the application XID")[0]
        assert (event.severity, event.xid, event.pid) == (Severity.APPLICATION, 31, 4242)
        assert monitor.unhealthy() == {}  # nor did the corrected ECC error change anything

        woke.clear()
        _fault(sim_nvml, "xid", 1, 79)
        # The GPU stops answering and its XID arrives; whichever the agent sees first, the
        # XID names the taint (a lost GPU seen first gives way to its cause).
        bad = wait_for(lambda: _cause(monitor, gpus[1]), 5, "GPU 1 unhealthy with its XID")
        assert (bad.xid, bad.verdict.taint_value) == (79, "xid-79")
        assert woke.wait(1)
        lost = "GPU stopped answering NVML"
        wait_for(lambda: any(e.meaning == lost for e in monitor.take_events()), 5, lost)
        assert monitor.unhealthy()[gpus[1].uuid].since == bad.since  # the first cause stays

        _fault(sim_nvml, "recover", 1)
        wait_for(lambda: not monitor.unhealthy(), 5, "GPU 1 healthy again")
        assert any(e.recovered for e in monitor.take_events())

        _fault(sim_nvml, "ecc", 0, "double")
        bad = wait_for(lambda: monitor.unhealthy().get(gpus[0].uuid), 5, "GPU 0 unhealthy")
        assert bad.verdict.taint_value == "ecc-double-bit"
        assert monitor.counts[(gpus[0].uuid, "31", "application")] == 1
    finally:
        monitor.stop()
