"""What the core cannot stop, the node agent's NVML backstop stops within two intervals.

The core lives in the dynamic linker's world (dlsym, dlvsym, dlopen, dlmopen and
cuGetProcAddress all hand out its hooks, tests/native/test_lookup_escapes.py). A program that
leaves that world reaches the driver unhooked: the driver's entry points found by reading
libcuda's symbol table (what issuing the driver's ioctls amounts to on simgpu, which has no
device node), or a static binary that never reads /etc/ld.so.preload. Each test runs the
agent's collector on its own tick, as `nodeagent.agent` does, starts the escape inside a 1 GiB
claim whose honest process holds 0.9 GiB, and measures from the escape holding its memory to
the process being gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers.cdi_launch import launch_script
from tests.helpers.skips import NATIVE_BUILD
from tests.helpers.ticking import collector_ticking
from tests.integration.agents.test_backstop import GIB, POD, Workload, pod_cgroup

INTERVAL = 0.5  # the agent's tick here; production ticks are longer, the bound is in ticks
ESCAPE_BYTES = 3 << 29  # 1.5 GiB on a 1 GiB slice
LOOKUPS = NATIVE_BUILD / "tests" / "lookups"
SHIM = NATIVE_BUILD / "tests" / "libdeepshim.so"
pytestmark = pytest.mark.skipif(
    not LOOKUPS.exists() or not SHIM.exists(),
    reason="needs `make -C nodeagent/native` (tests/lookups, tests/libdeepshim.so)",
)


@contextmanager
def agent_ticking(w: Workload) -> Iterator[None]:
    """The collector with kill on, sampled every INTERVAL on a thread of its own."""
    with collector_ticking(w.collector(kill=True), INTERVAL):
        yield


def _start(w: Workload, command: list[str], mounts: list[dict]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         launch_script(mounts, command)],
        env=w.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip


def _stopped_within(proc: subprocess.Popen[str], ready: str) -> float:
    """Seconds from the escape announcing `ready` (memory held) to its death by SIGKILL."""
    line = proc.stdout.readline()
    held_at = time.monotonic()
    assert line.startswith(ready), line + proc.stdout.read()
    deadline = held_at + 10 * INTERVAL
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    gone = time.monotonic() - held_at
    assert proc.returncode == -signal.SIGKILL, f"not stopped after {gone:.2f}s"
    return gone


def _end(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()


def test_a_process_that_reached_the_driver_around_the_core_is_stopped(sim_nvml: dict) -> None:
    """In a process that loaded the core: cuMemAlloc_v2 read from libcuda's symbol table."""
    how = "elfwalk"
    w = Workload(sim_nvml, "e5ca9e00-0000-4000-8000-000000000002", permille=0)
    escape = None
    try:
        with agent_ticking(w):
            escape = _start(w, [str(LOOKUPS), "escape", how, str(ESCAPE_BYTES), str(SHIM)],
                            w.mounts)  # fmt: skip
            gone = _stopped_within(escape, "held")
            assert w.proc.poll() is None  # the process inside its slice keeps running
        print(f"{how}: escape held to stopped: {gone * 1000:.0f} ms")  # noqa: T201
        assert gone <= 2 * INTERVAL
    finally:
        if escape is not None:
            _end(escape)
        w.close()


def test_a_static_binary_in_the_pod_is_stopped(sim_nvml: dict) -> None:
    """A static binary never reads /etc/ld.so.preload: modelled by the same workload run in
    the container's mounts without the preload, and no LD_PRELOAD. It holds no slot; its pod
    cgroup ties it to the claim."""
    with pod_cgroup(POD) as move:
        w = Workload(sim_nvml, "e5ca9e00-0000-4000-8000-0000000000aa", permille=0, pod_uid=POD)
        move(w.proc.pid)
        no_preload = [m for m in w.mounts if m["containerPath"] != "/etc/ld.so.preload"]
        command = ["sh", "-c", 'echo $$ > "$0"; exec "$@"', str(w.state / "static.pid"),
                   "env", "-u", "LD_PRELOAD", str(LOOKUPS), "escape", "elfwalk",
                   str(ESCAPE_BYTES), str(SHIM)]  # fmt: skip
        static = None
        try:
            with agent_ticking(w):
                static = _start(w, command, no_preload)
                pid_file = w.state / "static.pid"
                deadline = time.monotonic() + 10
                while not pid_file.exists() and time.monotonic() < deadline:
                    time.sleep(0.01)
                move(int(pid_file.read_text()))
                gone = _stopped_within(static, "held")
                assert w.proc.poll() is None
            print(f"static: escape held to stopped: {gone * 1000:.0f} ms")  # noqa: T201
            assert gone <= 2 * INTERVAL
        finally:
            if static is not None:
                _end(static)
            w.close()


def test_a_raw_clone_child_that_kept_its_parents_slot_is_stopped_past_the_tolerance(
    sim_nvml: dict,
) -> None:
    """The core's one slot gap (tests/native/progs/keepfork.c): a child made by a raw clone()
    after madvise(MADV_KEEPONFORK) over the core's owner page charges its parent's slot; the
    parent exits, the child drops the lock, and the next process to start reclaims the slot
    under the child's 0.9 GiB. The core then admits that process's own 0.9 GiB too: 1.8 GiB
    held on a 1 GiB claim. NVML lists the child's memory under its own pid, in no live slot,
    so the backstop stops it (and not the honest process) once the claim is over its slice by
    the tolerance, within two ticks."""
    with pod_cgroup(POD) as move:
        w = Workload(sim_nvml, "e5ca9e00-0000-4000-8000-0000000000cf", permille=0, pod_uid=POD)
        os.killpg(w.proc.pid, signal.SIGKILL)  # the child and the peer share the cap alone
        w.proc.wait(timeout=10)
        child = child_pid = None
        try:
            child = _start(w, [str(NATIVE_BUILD / "tests" / "keepfork"), str(int(0.9 * GIB))],
                           w.mounts)  # fmt: skip
            move(child.pid)  # the pod's process: its raw-clone child is born in the pod
            child.stdin.write("go\n")
            child.stdin.flush()
            line = child.stdout.readline()
            assert line.startswith("child "), line + child.stdout.read()
            child_pid = int(line.split()[1])
            with agent_ticking(w):
                peer, events = w.another(0.9)  # reclaims the "dead" slot at start-up
                admitted_at = time.monotonic()
                assert events[-1].get("held") == int(0.9 * GIB), events  # the gap: admitted
                deadline = admitted_at + 10 * INTERVAL
                while _alive(child_pid) and time.monotonic() < deadline:
                    time.sleep(0.01)
                gone = time.monotonic() - admitted_at
                assert not _alive(child_pid), f"the child still runs after {gone:.2f}s"
                assert peer.poll() is None  # the honest process keeps running
            print(f"keepfork: admitted over the cap to the child stopped: {gone * 1000:.0f} ms")  # noqa: T201
            assert gone <= 2 * INTERVAL
        finally:
            if child_pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child_pid, signal.SIGKILL)
            if child is not None:
                _end(child)
            w.close()


def _alive(pid: int) -> bool:
    """Running (a killed process reparented to an init that has not reaped it yet is a
    zombie: gone for the GPU)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")
