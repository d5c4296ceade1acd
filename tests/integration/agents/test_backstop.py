"""The agent's NVML backstop on the simulated GPU, without Kubernetes: a claim for a 1 GiB slice
prepared by the plugin, a workload run under the real interception core on simgpu with the CDI
edits applied, allocating 0.9 GiB (admitted by the core). simgpu's test-only fault injection
`SIMGPU_DRIVER_OVERHEAD_PERMILLE=500` makes every allocation also take half its size again as
"driver overhead" the core cannot see, so NVML per-process usage (~1.35 GiB) exceeds the cap
plus the tolerance. A real `Collector` with the real `discovery.process_memory` (pynvml on
simgpu's libnvidia-ml, loaded in this process as the agent does in simulation mode) must report
the pid and, with kill enabled, stop it by SIGKILL; with kill disabled it only reports; without
the overhead there is no finding."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from nodeagent import cdi, discovery
from nodeagent.draplugin.prepare import Layout, Preparer
from nodeagent.kubeletlite import apply_cdi, launch_script
from nodeagent.status import Collector
from tests.unit.nodeagent.conftest import NODE, allocated_claim, v100

REPO = Path(__file__).resolve().parents[3]
BUILD = REPO / "nodeagent" / "native" / "build"
GIB, MIB = 1024**3, 1024**2
TOLERANCE = 64 * MIB
pytestmark = pytest.mark.skipif(
    not (BUILD / "libtranche.so").exists() or shutil.which("unshare") is None,
    reason="needs `make -C nodeagent/native` (libtranche.so, simgpu) and unshare(1)",
)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """simgpu for this process (NVML, read by the collector) and the workloads. simgpu reads
    SIMGPU_CONFIG/STATE once per process, so the module shares one state file."""
    tmp = tmp_path_factory.mktemp("simgpu")
    gpu = v100(1)
    conf = tmp / "simgpu.conf"
    conf.write_text(
        f'device name="{gpu.name}" memory_mib=32768 context_mib=16 uuid={v100(0).uuid}\n'
        f'device name="{gpu.name}" memory_mib=32768 context_mib=16 uuid={gpu.uuid}\n'
    )
    env = {"SIMGPU_CONFIG": str(conf), "SIMGPU_STATE": str(tmp / "simgpu.state")}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    # As the agent does in simulation mode: pynvml's "libnvidia-ml.so.1" resolves to simgpu's.
    ctypes.CDLL(str(BUILD / "simgpu" / "libnvidia-ml.so.1"), mode=ctypes.RTLD_GLOBAL)
    yield {**env, "LD_LIBRARY_PATH": str(BUILD / "simgpu")}
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


class Workload:
    """A prepared 1 GiB claim and a workload holding 0.9 GiB under the core on simgpu."""

    def __init__(self, sim: dict, uid: str, permille: int):
        self.uid = uid
        self.state = Path(tempfile.mkdtemp(prefix="tr-backstop-"))
        layout = Layout(self.state, self.state / "cdi", BUILD / "libtranche.so", simulate=True)
        claim = allocated_claim(uid, memory="1Gi")
        self.preparer = Preparer(NODE, [v100(0), v100(1)], layout, lambda ns, n: claim)
        prepared = self.preparer.prepare("acme-ml", "pod-a-gpu-x7k2", uid)
        spec = json.loads(cdi.spec_path(layout.cdi_dir, uid).read_text())
        env, mounts = apply_cdi(spec, [d.cdi_id.split("=", 1)[1] for d in prepared.devices])
        cmd = [sys.executable, "-m", "nodeagent.workload", "--memory-gib", "0.9", "--duty", "0"]
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             launch_script(mounts, [*cmd, "--seconds", "120"])],
            env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), **sim, **env,
                 "SIMGPU_DRIVER_OVERHEAD_PERMILLE": str(permille)},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        events = []
        for line in self.proc.stdout:
            events.append(json.loads(line) if line.startswith("{") else {"raw": line})
            if events[-1].get("event") == "running" or "raw" in events[-1]:
                break
        self.running_at = time.monotonic()
        assert events, "the workload printed nothing"
        assert events[-1].get("held") == int(0.9 * GIB), f"not admitted: {events}"

    def collector(self, kill: bool) -> Collector:
        return Collector(
            NODE,
            self.preparer.checkpoint,
            [v100(0), v100(1)],
            nvml_process_memory=discovery.process_memory,
            tolerance_bytes=TOLERANCE,
            kill_offenders=kill,
        )

    def findings(self, collector: Collector) -> list[str]:
        claim = self.preparer.checkpoint.get(self.uid)
        reading = collector._read(claim)
        assert reading
        assert self.proc.pid in {s.pid for s in reading.live_slots}
        return collector._cross_check(claim, reading)

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc.stdout.close()
        self.preparer.unprepare(self.uid)
        shutil.rmtree(self.state, ignore_errors=True)


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_backstop_kills_a_process_over_its_cap_by_driver_overhead(sim):
    w = Workload(sim, "bac0c1a1-0000-4000-8000-000000000001", permille=500)
    try:
        nvml = discovery.process_memory(v100(1).uuid).get(w.proc.pid, 0)
        assert nvml > GIB + TOLERANCE, nvml  # ~1.35 GiB (+ context) seen by NVML
        collector = w.collector(kill=True)
        findings = w.findings(collector)
        assert len(findings) == 1, findings
        assert f"offending pid {w.proc.pid}" in findings[0]
        assert w.uid in findings[0]
        assert v100(1).uuid in findings[0]
        rc = _wait(w.proc.poll, 5, "the offending process to be stopped")
        stopped = time.monotonic() - w.running_at
        assert rc == -signal.SIGKILL, rc
        # The agent's full sample also reports it (and finds nothing left to stop).
        _gpus, pods = collector.collect()
        assert pods[("acme-ml", "pod-a")]["processes"] == 0
    finally:
        w.close()
    print(f"over-cap to process stopped: {stopped * 1000:.0f} ms")  # noqa: T201


def test_backstop_reports_but_leaves_the_process_when_kill_is_off(sim):
    w = Workload(sim, "bac0c1a1-0000-4000-8000-000000000002", permille=500)
    try:
        collector = w.collector(kill=False)
        first = w.findings(collector)
        assert len(first) == 1, first
        assert f"offending pid {w.proc.pid}" in first[0]
        assert w.findings(collector) == first  # still there on the next sample: not stopped
        assert w.proc.poll() is None
    finally:
        w.close()


def test_no_finding_without_driver_overhead(sim):
    w = Workload(sim, "bac0c1a1-0000-4000-8000-000000000003", permille=0)
    try:
        nvml = discovery.process_memory(v100(1).uuid).get(w.proc.pid, 0)
        assert int(0.9 * GIB) <= nvml <= GIB, nvml
        collector = w.collector(kill=True)
        assert w.findings(collector) == []
        assert w.proc.poll() is None
    finally:
        w.close()
