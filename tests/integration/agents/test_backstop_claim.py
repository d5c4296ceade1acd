"""The backstop acts on the claim, not on one process (issue #44), with the core bypassed.

Memory: a static binary (tests/native/progs/static/zombiechain.c, built here with simgpu's
simstate.c: no loader, so no core) chains processes in the pod that each take device memory
from the simulated driver and then leave by SYS_exit from their main thread while a second
thread keeps the process. Each leader reads "Z" and its /proc/<pid>/cgroup reads "/" on
cgroup v1: only its live thread's cgroup names the pod. The backstop must still charge them to
the claim and bring the claim back under its cap plus the tolerance within two ticks, at every
pace, with the pod's report saying why.

Compute: a tenant that restarts a program launching around the core's meter (the driver's
cuLaunchKernel read from libcuda's symbol table) as soon as it stops. Stopping a process does
not hold that; throttling the pod's cgroup does: over 30 s from the first launch the claim gets
at most 30 % of the device on a 25 % share (simgpu's own busy counter, not NVML's samples, is
the ground truth).

Each test runs the real collector on its own 0.5 s tick, as `nodeagent.agent` does, with pod
cgroups created for real as kubelet's cgroupfs driver names them, in the pids and freezer
hierarchies (root and cgroup v1 with a freezer, as on this machine, else skipped).
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent import discovery
from tests.helpers.cdi_launch import launch_script
from tests.helpers.gpus import v100
from tests.helpers.skips import NATIVE_BUILD, needs_native_sim
from tests.helpers.ticking import collector_ticking
from tests.integration.agents.test_backstop import GIB, MIB, TOLERANCE, Workload
from tests.integration.agents.test_backstop_compute import Node

REPO = Path(__file__).resolve().parents[3]
SIMGPU = REPO / "nodeagent" / "native" / "simgpu"
CHAIN_SRC = REPO / "tests" / "native" / "progs" / "static" / "zombiechain.c"
LOOKUPS = NATIVE_BUILD / "tests" / "lookups"
INTERVAL = 0.5  # the agent's tick here; production ticks are longer, the bounds are in ticks
CGROUPS = Path("/sys/fs/cgroup")
POD = "5eed0000-0000-4000-8000-0000000000d4"
pytestmark = [needs_native_sim, pytest.mark.skipif(not LOOKUPS.exists(), reason="make native")]


@pytest.fixture(scope="module")
def zombiechain(tmp_path_factory) -> Path:
    """The static chain binary, built as the sample image builds tranche-bypass."""
    out = tmp_path_factory.mktemp("static") / "zombiechain"
    built = subprocess.run(
        ["cc", "-O1", "-static", f"-I{SIMGPU}", "-o", str(out), str(CHAIN_SRC),
         str(SIMGPU / "simstate.c"), "-lpthread"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if built.returncode != 0:
        pytest.skip(f"cannot link a static binary here: {built.stderr[-300:]}")
    return out


@contextlib.contextmanager
def pod_cgroups(pod_uid: str) -> Iterator[list[Path]]:
    """The pod's container cgroup in the pids and freezer hierarchies (kubelet creates one in
    each); yields their cgroup.procs files."""
    leaves = []
    for hierarchy in ("pids", "freezer"):
        base = CGROUPS / hierarchy
        if not (base / "cgroup.procs").exists() or not os.access(base, os.W_OK):
            pytest.skip(f"no writable cgroup v1 {hierarchy} hierarchy (needs root)")
        leaves.append(base / "tranche-test" / "kubepods" / "besteffort" / f"pod{pod_uid}" / "c0")
    for leaf in leaves:
        leaf.mkdir(parents=True, exist_ok=True)
    try:
        yield [leaf / "cgroup.procs" for leaf in leaves]
    finally:
        with contextlib.suppress(OSError):  # a frozen process cannot die
            (leaves[1].parent / "freezer.state").write_text("THAWED")
        for leaf in leaves:
            deadline = time.monotonic() + 5  # killed processes leave their cgroup as they exit
            while (leaf / "cgroup.procs").exists() and (leaf / "cgroup.procs").read_text():
                if time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            for d in (leaf, *leaf.parents):
                with contextlib.suppress(OSError):
                    d.rmdir()
                if d.name == "tranche-test":
                    break


def _move(procs: list[Path], pid: int) -> None:
    for f in procs:
        f.write_text(str(pid))


def _in_pod(
    procs: list[Path], command: list[str], env: dict, mounts: list[dict], core: bool = False
) -> subprocess.Popen[str]:
    """`command` started in the container's mounts, inside the pod's cgroups before it runs
    (its children are born there); without the core's preload unless `core` (a static binary
    never reads it)."""
    join = "; ".join(f'echo $$ > "{f}"' for f in procs)
    if not core:
        mounts = [m for m in mounts if m["containerPath"] != "/etc/ld.so.preload"]
        env = {k: v for k, v in env.items() if k != "LD_PRELOAD"}
    in_pod = ["sh", "-c", f'{join}; exec "$@"', "in-pod", *command]
    return subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         launch_script(mounts, in_pod)],
        env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip


class OverCap:
    """Samples what NVML lists on the claim's GPU every 10 ms (this test's pod is its only
    user) and records each stretch of time it stays over `bound`."""

    def __init__(self, uuid: str, bound: int) -> None:
        self.uuid, self.bound = uuid, bound
        self.runs: list[float] = []
        self.peak = 0
        self._since: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            held = sum(discovery.process_memory(self.uuid).values())
            now = time.monotonic()
            self.peak = max(self.peak, held)
            if held > self.bound and self._since is None:
                self._since = now
            elif held <= self.bound and self._since is not None:
                self.runs.append(now - self._since)
                self._since = None
            self._stop.wait(0.01)

    def __enter__(self) -> OverCap:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self._since is not None:  # still over at the end: a run that never ended
            self.runs.append(float("inf"))


def _alive(pid: int) -> bool:
    """Whether any thread of process `pid` still runs (its leader may be a zombie)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                return True
    return False


@pytest.mark.parametrize("pace", [0.05, 0.3, 2.0])
def test_a_zombie_leader_chain_around_the_core_is_brought_under_the_cap(
    sim_nvml: dict, zombiechain: Path, pace: float
) -> None:
    """0.9 GiB held by an honest process through the core, then four 256 MiB zombie-leader
    processes of the static chain, `pace` apart, on a 1 GiB claim."""
    links, link_mib = 4, 256
    with pod_cgroups(POD) as procs:
        w = Workload(sim_nvml, f"5eed0000-0000-4000-8000-0000000{int(pace * 100):05d}", 0, POD)
        _move(procs, w.proc.pid)
        collector = w.collector(kill=True)
        chain = None
        pids: list[int] = []
        try:
            with (
                collector_ticking(collector, INTERVAL),
                OverCap(v100(1).uuid, GIB + TOLERANCE) as over,
            ):
                chain = _in_pod(procs, [str(zombiechain), str(link_mib), str(links), str(pace)],
                                w.env, w.mounts)  # fmt: skip
                for line in chain.stdout:
                    if line.startswith("held "):
                        pids.append(int(line.split()[2]))
                    if line.startswith(("chain done", "FAIL")):
                        break
                assert len(pids) == links, (line, pids)
                deadline = time.monotonic() + 2 * INTERVAL + 0.2
                while any(_alive(p) for p in pids) and time.monotonic() < deadline:
                    time.sleep(0.01)
                time.sleep(0.05)  # the sampler sees the last one gone
            survivors = [p for p in pids if _alive(p)]
            _gpus, pods = collector.collect()
            findings = collector.take_findings()
        finally:
            if chain is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(chain.pid, signal.SIGKILL)
                for p in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(p, signal.SIGKILL)
                chain.wait(timeout=10)
                chain.stdout.close()
            alive = w.proc.poll() is None
            w.close()
    runs = ", ".join(f"{r * 1000:.0f}" for r in over.runs)
    seen = f"peak {over.peak / MIB:.0f} MiB on a 1024 MiB claim, over cap + tolerance for {runs} ms"
    print(f"zombie chain at {pace} s: {seen}")  # noqa: T201
    assert not survivors, f"chain processes still hold the GPU: {survivors}"
    assert alive, "the honest process within its accounting was stopped"
    assert over.peak > GIB + TOLERANCE  # the chain really went over
    assert over.runs
    assert max(over.runs) <= 2 * INTERVAL, over.runs
    stopped = [f for f in findings if f["kind"] == "backstop-stopped"]
    assert stopped
    assert all(str(p) in " ".join(f["detail"] for f in stopped) for p in pids), stopped
    told = pods[("acme-ml", "pod-a")].get("enforcement", "")
    assert "were stopped" in told, told
    assert "on a 1024 MiB slice" in told, told


def _device_busy_ns(state: str, host_index: int) -> int:
    """simgpu's own count of kernel time ever queued on a device (sim_dev_t.busy_total, after
    the state file's 16-byte header; 48 bytes per device): the ground truth, not NVML."""
    with open(state, "rb") as f:
        f.seek(16 + 48 * host_index + 16)
        return struct.unpack("<Q", f.read(8))[0]


def test_a_restarting_compute_escaper_is_held_to_its_share_by_its_pods_cgroup(
    sim_nvml: dict,
) -> None:
    """On a 25 % claim, a shell in the pod restarts `lookups spin` (the driver's own
    cuLaunchKernel: 1 ms kernels back to back, metered by nothing) whenever it ends or is
    killed. Over 30 s from its first launch the claim gets at most 30 % of the device."""
    seconds, pod = 30.0, "5eed0000-0000-4000-8000-0000000000c3"
    node = Node(sim_nvml)
    shell = None
    try:
        env, mounts = node.container("escaper", "e7a0e000-0000-4000-8000-0000000000c3", 1, 25,
                                      pod_uid=pod)  # fmt: skip
        with pod_cgroups(pod) as procs:
            # Two ticks, as the agent's default window is two of its 1 s ticks.
            with node.agent_ticking(window_s=2 * INTERVAL) as collector:
                loop = f"while :; do {LOOKUPS} spin {seconds + 5:g}; echo restarted; done"
                shell = _in_pod(procs, ["sh", "-c", loop], env, mounts)
                line = shell.stdout.readline()
                assert "running" in line, line
                busy0, t0 = _device_busy_ns(env["SIMGPU_STATE"], 1), time.monotonic()
                time.sleep(seconds / 3)
                busy_mid, t_mid = _device_busy_ns(env["SIMGPU_STATE"], 1), time.monotonic()
                time.sleep(t0 + seconds - time.monotonic())
                busy1, t1 = _device_busy_ns(env["SIMGPU_STATE"], 1), time.monotonic()
                findings = collector.take_findings()
                _gpus, pods = collector.collect()
            os.killpg(shell.pid, signal.SIGKILL)
    finally:
        if shell is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(shell.pid, signal.SIGKILL)
            shell.wait(timeout=10)
            shell.stdout.close()
        node.close()
    share = 100 * (busy1 - busy0) / ((t1 - t0) * 1e9)
    held_share = 100 * (busy1 - busy_mid) / ((t1 - t_mid) * 1e9)
    held = [f for f in findings if f["kind"] == "backstop-throttled"]
    stops = len([f for f in findings if f["kind"] == "backstop-stopped"])
    seen = (f"{share:.1f} % of the device over {t1 - t0:.1f} s ({held_share:.1f} % over its "
            f"last {t1 - t_mid:.0f} s); {len(held)} throttle(s), {stops} stop(s)")  # fmt: skip
    print(f"restarting escaper on a 25 % claim: {seen}")  # noqa: T201
    assert share <= 30.0, (share, findings)
    assert held, findings
    assert "held to 25 %" in held[0]["detail"], findings
    told = next(iter(pods.values())).get("enforcement", "")
    assert "GPU compute held to its 25 % share" in told, told


def test_an_honest_program_in_its_pod_is_not_held_by_the_short_window(sim_nvml: dict) -> None:
    """The same two-tick window and tolerance, a program under the core launching all the time
    it is let on a 25 % claim, its pod's cgroup holdable: over 8 s nothing is held or stopped
    and it keeps its share."""
    pod = "5eed0000-0000-4000-8000-0000000000c4"
    node = Node(sim_nvml)
    proc = None
    try:
        env, mounts = node.container("honest", "e7a0e000-0000-4000-8000-0000000000c4", 1, 25,
                                     pod_uid=pod)  # fmt: skip
        with pod_cgroups(pod) as procs:
            with node.agent_ticking(window_s=2 * INTERVAL) as collector:
                cmd = [sys.executable, "-m", "nodeagent.sim.workload", "--memory-gib", "0.25",
                       "--duty", "1", "--seconds", "30"]  # fmt: skip
                proc = _in_pod(procs, cmd, env, mounts, core=True)
                for line in proc.stdout:  # its context, its memory, then running
                    if '"running"' in line or not line.startswith("{"):
                        break
                assert '"running"' in line, line
                busy0, t0 = _device_busy_ns(env["SIMGPU_STATE"], 1), time.monotonic()
                time.sleep(8.0)
                busy1, t1 = _device_busy_ns(env["SIMGPU_STATE"], 1), time.monotonic()
                findings = collector.take_findings()
                _gpus, pods = collector.collect()
            assert proc.poll() is None
            os.killpg(proc.pid, signal.SIGKILL)  # out of the pod's cgroups before they go
            proc.wait(timeout=10)
    finally:
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            proc.stdout.close()
        node.close()
    share = 100 * (busy1 - busy0) / ((t1 - t0) * 1e9)
    print(f"honest 25 % program in its pod: {share:.1f} % of the device over 8 s")  # noqa: T201
    assert [f for f in findings if f["kind"].startswith("backstop")] == []
    assert "enforcement" not in next(iter(pods.values()))
    assert 22 <= share <= 28
