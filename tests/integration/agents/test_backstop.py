"""The agent's NVML backstop on the simulated GPU, without Kubernetes: a claim for a 1 GiB slice
prepared by the plugin, a workload run under the real interception core on simgpu with the CDI
edits applied, allocating 0.9 GiB (admitted by the core). simgpu's test-only fault injection
`SIMGPU_DRIVER_OVERHEAD_PERMILLE=500` makes every allocation also take half its size again as
"driver overhead" the core cannot see, so NVML per-process usage (~1.35 GiB) exceeds the cap
plus the tolerance. A real `Collector` with the real `discovery.process_memory` (pynvml on
simgpu's libnvidia-ml, loaded in this process as the agent does in simulation mode) must report
the pid and, with kill enabled, stop it by SIGKILL; with kill disabled it only reports; without
the overhead there is no finding.

Processes that never loaded the core (run here without LD_PRELOAD or the CDI edits: what a
static binary or a program talking to the driver directly looks like) are attributed by their
pod cgroup, as kubelet's cgroupfs driver names it. The tests create such cgroups for real
(root and a writable cgroup hierarchy needed, else they skip): a bypassing process in a claimed
pod counts against the claim and is the one stopped; one in a pod with no claim on the GPU is
stopped; one outside every pod (the host's) is left alone."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from nodeagent import cdi, discovery, region
from nodeagent.draplugin.prepare import Layout, Preparer
from nodeagent.status import Collector
from tests.helpers.cdi_launch import apply_cdi, launch_script
from tests.helpers.gpus import NODE, allocated_claim, v100
from tests.helpers.skips import NATIVE_BUILD, needs_native_sim
from tests.helpers.wait import wait_for

_wait = functools.partial(wait_for, interval=0.02)  # a stopped process is seen at once

REPO = Path(__file__).resolve().parents[3]
GIB, MIB = 1024**3, 1024**2
TOLERANCE = 64 * MIB
pytestmark = needs_native_sim


@pytest.fixture(scope="module")
def sim(sim_nvml):
    """simgpu for this process and the workloads (tests/integration/agents/conftest.py)."""
    return sim_nvml


class Workload:
    """A prepared 1 GiB claim and a workload holding 0.9 GiB under the core on simgpu."""

    def __init__(self, sim: dict, uid: str, permille: int, pod_uid: str = "p-1"):
        self.uid = uid
        self.state = Path(tempfile.mkdtemp(prefix="tr-backstop-"))
        layout = Layout(
            self.state, self.state / "cdi", NATIVE_BUILD / "libtranche.so", simulate=True
        )
        claim = allocated_claim(uid, memory="1Gi", pod_uid=pod_uid)
        self.preparer = Preparer(NODE, [v100(0), v100(1)], layout, lambda ns, n: claim)
        prepared = self.preparer.prepare("acme-ml", "pod-a-gpu-x7k2", uid)
        spec = json.loads(cdi.spec_path(layout.cdi_dir, uid).read_text())
        self.region_dir = Path(prepared.region_dir)
        self.env, self.mounts = apply_cdi(
            spec, [d.cdi_id.split("=", 1)[1] for d in prepared.devices]
        )
        self.env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), **sim, **self.env,
                    "SIMGPU_DRIVER_OVERHEAD_PERMILLE": str(permille)}  # fmt: skip
        self.extra: list[subprocess.Popen] = []
        self.proc, events = self._start(0.9)
        self.running_at = time.monotonic()
        assert events[-1].get("held") == int(0.9 * GIB), f"not admitted: {events}"

    def _start(self, gib: float) -> tuple[subprocess.Popen, list[dict]]:
        """One workload process of this container (CDI edits applied) holding `gib`."""
        cmd = [sys.executable, "-m", "nodeagent.sim.workload", "--memory-gib", str(gib),
               "--duty", "0"]  # fmt: skip
        proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             launch_script(self.mounts, [*cmd, "--seconds", "120"])],
            env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )  # fmt: skip
        events = []
        for line in proc.stdout:
            events.append(json.loads(line) if line.startswith("{") else {"raw": line})
            if events[-1].get("event") == "running" or "raw" in events[-1]:
                break
        assert events, "the workload printed nothing"
        return proc, events

    def another(self, gib: float) -> tuple[subprocess.Popen, list[dict]]:
        """A second process in the same container."""
        proc, events = self._start(gib)
        self.extra.append(proc)
        return proc, events

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
        return collector.cross_check({claim.uid: reading})

    def close(self) -> None:
        for proc in (self.proc, *self.extra):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            proc.stdout.close()
        self.preparer.unprepare(self.uid)
        shutil.rmtree(self.state, ignore_errors=True)


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


def test_a_killed_process_is_no_longer_listed_by_nvml(sim):
    """NVML lists live processes only: a SIGKILLed workload's pid (its simgpu slot not yet
    reclaimed, since no simgpu process started after it) must not be listed, or the backstop
    would blame whichever process of a pod the kernel gives that pid next."""
    w = Workload(sim, "bac0c1a1-0000-4000-8000-000000000005", permille=0)
    try:
        pid = w.proc.pid
        assert discovery.process_memory(v100(1).uuid).get(pid, 0) >= int(0.9 * GIB)
        os.killpg(pid, signal.SIGKILL)
        w.proc.wait(timeout=10)
        assert pid not in discovery.process_memory(v100(1).uuid)
    finally:
        w.close()


def _cgroup_hierarchy() -> Path | None:
    """A cgroup hierarchy this process may create cgroups in (v1 pids, or v2), else None."""
    for base in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")):
        if (base / "cgroup.procs").exists() and os.access(base, os.W_OK):
            return base
    return None


@contextlib.contextmanager
def pod_cgroup(pod_uid: str):
    """A container cgroup named as kubelet's cgroupfs driver names it
    (.../kubepods/besteffort/pod<uid>/<container>); yields a function moving a pid into it."""
    base = _cgroup_hierarchy()
    if base is None:
        pytest.skip("no writable cgroup hierarchy (needs root)")
    top = base / "tranche-test"
    leaf = top / "kubepods" / "besteffort" / f"pod{pod_uid}" / "c0"
    leaf.mkdir(parents=True, exist_ok=True)
    try:
        yield lambda pid: (leaf / "cgroup.procs").write_text(str(pid))
    finally:
        for d in (leaf, *leaf.parents):
            with contextlib.suppress(OSError):
                d.rmdir()
            if d == top:
                break


def _bypass(sim: dict, gib: float) -> subprocess.Popen:
    """A workload on GPU 1 that never loaded the core; returns once it holds `gib`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "nodeagent.sim.workload", "--memory-gib", str(gib), "--duty", "0",
         "--seconds", "120"],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), **sim,
             "NVIDIA_VISIBLE_DEVICES": v100(1).uuid},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    for line in proc.stdout:
        event = json.loads(line) if line.startswith("{") else {"raw": line}
        if event.get("event") == "running" or "raw" in event:
            assert event.get("held") == int(gib * GIB), event
            return proc
    raise AssertionError("the bypassing workload printed nothing")


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()


POD = "5eed0000-0000-4000-8000-00000000000a"


def test_a_process_that_bypassed_the_core_counts_against_its_pods_claim(sim):
    """0.9 GiB through the core plus 0.5 GiB outside it, in one pod with a 1 GiB claim: the core
    never saw the 0.5 GiB; the backstop does, and stops the process that escaped the core."""
    with pod_cgroup(POD) as move:
        w = Workload(sim, "bac0c1a1-0000-4000-8000-000000000004", permille=0, pod_uid=POD)
        rogue = _bypass(sim, 0.5)
        try:
            move(w.proc.pid)
            move(rogue.pid)
            findings = w.findings(w.collector(kill=True))
            assert len(findings) == 1, findings
            assert f"offending pid {rogue.pid}" in findings[0]
            assert w.uid in findings[0]
            assert _wait(rogue.poll, 5, "the bypassing process to be stopped") == -signal.SIGKILL
            assert w.proc.poll() is None  # the process inside its slice keeps running
        finally:
            _end(rogue)
            w.close()


def test_a_pod_process_on_a_gpu_it_has_no_claim_on_is_stopped(sim):
    other_pod = "5eed0000-0000-4000-8000-00000000000b"
    with pod_cgroup(other_pod) as move:
        w = Workload(sim, "bac0c1a1-0000-4000-8000-000000000005", permille=0, pod_uid=POD)
        rogue = _bypass(sim, 0.25)
        try:
            move(rogue.pid)
            collector = w.collector(kill=False)
            collector.tenant_pod = {other_pod: True}.get  # a tenant's pod, per the API server
            findings = w.findings(collector)
            assert findings == [
                f"pod {other_pod} uses {discovery.process_memory(v100(1).uuid)[rogue.pid]} B on "
                f"{v100(1).uuid} without a claim on it; offending pid {rogue.pid}"
            ]
            assert rogue.poll() is None  # kill off: reported only
            collector.kill_offenders = True
            assert len(w.findings(collector)) == 1
            assert _wait(rogue.poll, 5, "the unsold process to be stopped") == -signal.SIGKILL
        finally:
            _end(rogue)
            w.close()


def test_host_processes_are_not_a_tenants(sim):
    """A GPU process outside every pod cgroup (the operator's) is neither charged nor stopped."""
    w = Workload(sim, "bac0c1a1-0000-4000-8000-000000000006", permille=0, pod_uid=POD)
    host = _bypass(sim, 0.5)
    try:
        assert w.findings(w.collector(kill=True)) == []
        assert host.poll() is None
    finally:
        _end(host)
        w.close()


def test_the_operators_pods_are_left_alone_and_unknown_ones_only_reported(sim):
    """Whose pod it is comes from the API server (nodeagent.owners.TenantPods, tested against
    the real control plane in tests/cluster/nodeagent/test_tenant_pods.py)."""
    operator_pod = "5eed0000-0000-4000-8000-00000000000c"
    with pod_cgroup(operator_pod) as move:
        w = Workload(sim, "bac0c1a1-0000-4000-8000-000000000007", permille=0, pod_uid=POD)
        burn = _bypass(sim, 0.25)
        try:
            move(burn.pid)
            collector = w.collector(kill=True)
            collector.tenant_pod = {operator_pod: False}.get
            assert w.findings(collector) == []
            collector.tenant_pod = lambda uid: None  # the API server cannot tell now
            (finding,) = w.findings(collector)
            assert finding.endswith("whose pod it is is unknown now, not stopped")
            assert burn.poll() is None
        finally:
            _end(burn)
            w.close()


def test_a_tenant_who_rewrites_the_region_still_meets_the_cap(sim):
    """The region is writable inside the container (its processes account there). Zeroing the
    used-bytes counter makes the core admit a second 0.9 GiB on a 1 GiB slice; NVML's view does
    not come from the region, so the backstop finds the claim over its cap and stops one."""
    w = Workload(sim, "bac0c1a1-0000-4000-8000-000000000008", permille=0)
    try:
        used_at = region.DEVICES_OFFSET + region.MEM_USED_OFFSET  # device 0 of the claim
        with region.region_path(w.region_dir).open("r+b") as f:
            f.seek(used_at)
            f.write(struct.pack("<Q", 0))
        second, events = w.another(0.9)
        assert events[-1].get("held") == int(0.9 * GIB), events  # the core was fooled
        collector = w.collector(kill=True)
        (finding,) = w.findings(collector)
        assert f"claim {w.uid} uses" in finding
        assert "over its 1073741824 B cap" in finding
        stopped = _wait(
            lambda: [p for p in (w.proc, second) if p.poll() is not None], 5, "one to be stopped"
        )
        assert [p.returncode for p in stopped] == [-signal.SIGKILL]
        claim = w.preparer.checkpoint.get(w.uid)
        assert collector.cross_check({w.uid: collector._read(claim)}) == []  # under the cap
    finally:
        w.close()
