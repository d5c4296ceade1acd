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

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.helpers.cdi_launch import launch_script
from tests.helpers.skips import NATIVE_BUILD
from tests.integration.agents.test_backstop import POD, Workload, pod_cgroup

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
    collector = w.collector(kill=True)
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            started = time.monotonic()
            collector.collect()
            stop.wait(max(0.0, INTERVAL - (time.monotonic() - started)))

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


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
