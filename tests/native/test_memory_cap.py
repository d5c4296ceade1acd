"""Memory cap: every allocation path is capped exactly, and the container sees its slice."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from nodeagent import region
from tests.native.conftest import CONTEXT_MIB, GiB, GpuBox, MiB

PATHS = ["alloc", "managed", "pitch", "async", "pool", "vmm", "array", "array3d", "mipmap"]
SLICE = 64 * MiB


def _run(args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, check=False, **kw)  # type: ignore[call-overload]


def _fields(line: str) -> dict[str, str]:
    """key=value pairs of a probe line (values may hold spaces)."""
    return dict(re.findall(r"(\w+)=(.*?)(?= \w+=|$)", line.strip()))


def _wait_line(proc: subprocess.Popen[str], prefix: str, deadline_s: float = 20) -> str:
    """Read stdout lines until one starts with prefix (the process's own readiness signal)."""
    assert proc.stdout is not None
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if line.startswith(prefix):
            return line
        if not line and proc.poll() is not None:
            break
    pytest.fail(f"no {prefix!r} line; stderr: {proc.stderr.read() if proc.stderr else ''}")


@pytest.mark.parametrize("path", PATHS)
def test_every_allocation_path_is_capped_exactly(any_box: GpuBox, path: str) -> None:
    c = any_box.container("c", [(0, SLICE, 100)])
    proc = any_box.run(c, "captest", path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Filled exactly what was left after the context's measured footprint, and no more.
    assert f"OK {path} filled={SLICE - CONTEXT_MIB * MiB} total={SLICE}" in proc.stdout
    snap = region.read_region(c.region_dir)
    assert snap.devices[0].rejected_allocations == 2  # one refused byte per round
    assert snap.devices[0].memory_peak == SLICE


def test_mem_get_info_and_device_total_report_the_slice(box: GpuBox) -> None:
    c = box.container("c", [(0, 8 * GiB, 100)])
    proc = box.run(c, "probe", "info")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fields = _fields(proc.stdout)
    assert int(fields["total"]) == 8 * GiB
    assert int(fields["device_total"]) == 8 * GiB
    assert int(fields["free"]) == 8 * GiB - CONTEXT_MIB * MiB
    assert fields["name"] == "Tesla V100-PCIE-32GB"
    assert fields["cc"] == "7.0"
    # Without the core, the same program sees the whole simulated card.
    plain = {k: v for k, v in c.env.items() if k != "LD_PRELOAD"}
    raw = _fields(box.run(plain, "probe", "info").stdout)
    assert int(raw["total"]) == 32768 * MiB


def test_nvml_through_pynvml_reports_the_slice(box: GpuBox) -> None:
    c = box.container("c", [(0, 8 * GiB, 100)])
    holder = box.start(c, "probe", "hold", str(16 * MiB))
    try:
        _wait_line(holder, "held")
        script = textwrap.dedent(
            """
            import pynvml
            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            m1 = pynvml.nvmlDeviceGetMemoryInfo(h)
            m2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
            print(m1.total, m1.used, m1.free, m2.total, m2.used, pynvml.nvmlDeviceGetName(h))
            """
        )
        proc = _run(
            [sys.executable, "-c", script], env=c.env, capture_output=True, text=True, timeout=60
        )
    finally:
        holder.communicate(timeout=20)
    assert proc.returncode == 0, proc.stderr
    total, used, free, total2, used2, *name = proc.stdout.split()
    held = 16 * MiB + CONTEXT_MIB * MiB
    assert (int(total), int(used), int(free)) == (8 * GiB, held, 8 * GiB - held)
    assert (int(total2), int(used2)) == (8 * GiB, held)
    assert " ".join(name) == "Tesla V100-PCIE-32GB"


def test_nvidia_smi_inside_the_container_shows_the_slice(box: GpuBox) -> None:
    c = box.container("c", [(0, 8 * GiB, 100)])
    smi = str(box.build.root / "simgpu" / "nvidia-smi")
    inside = _run([smi], env=c.env, capture_output=True, text=True, timeout=30)
    assert inside.returncode == 0, inside.stderr
    assert "SIMULATED" in inside.stdout
    assert "/  8192MiB" in inside.stdout.splitlines()[5]
    plain = {k: v for k, v in c.env.items() if k != "LD_PRELOAD"}
    outside = _run([smi], env=plain, capture_output=True, text=True, timeout=30)
    assert "/ 32768MiB" in outside.stdout.splitlines()[5]


def test_python_ctypes_program_is_capped(box: GpuBox) -> None:
    c = box.container("c", [(0, SLICE, 100)])
    script = textwrap.dedent(
        """
        import ctypes
        cu = ctypes.CDLL("libcuda.so.1")
        dev, ctx, p, q = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_uint64()
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        assert cu.cuInit(0) == 0
        assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
        assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
        assert cu.cuCtxSetCurrent(ctx) == 0
        assert cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
        assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(free.value)) == 0
        over = cu.cuMemAlloc_v2(ctypes.byref(q), ctypes.c_size_t(1))
        assert cu.cuMemFree_v2(p) == 0
        again = cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(free.value))
        print(total.value, free.value, over, again)
        """
    )
    proc = _run(
        [sys.executable, "-c", script], env=c.env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(SLICE), str(SLICE - CONTEXT_MIB * MiB), "2", "0"]


def test_symbols_resolved_at_run_time_get_the_hooks(any_box: GpuBox) -> None:
    c = any_box.container("c", [(0, SLICE, 100)])
    proc = any_box.run(c, "probe", "getproc")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK getproc" in proc.stdout


def test_eight_racing_processes_never_exceed_the_cap(any_box: GpuBox) -> None:
    cap = 256 * MiB
    c = any_box.container("c", [(0, cap, 100)])
    procs = [any_box.start(c, "probe", "race", str(seed)) for seed in range(8)]
    try:
        for p in procs:
            _wait_line(p, "ready")
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        held = [int(_wait_line(p, "held", 120).split()[1]) for p in procs]
        snap = region.read_region(c.region_dir)
        dev = snap.devices[0]
        # The counter never passed the cap, and it accounts for every byte the processes hold.
        assert dev.memory_peak <= cap
        assert dev.memory_used == sum(held) + 8 * CONTEXT_MIB * MiB
        assert cap - dev.memory_used < 4096  # filled to the last page
        assert dev.rejected_allocations > 0
        assert len(snap.live_slots) == 8
    finally:
        for p in procs:
            p.communicate(timeout=60)
    assert all(p.returncode == 0 for p in procs)


def test_sigkilled_process_memory_is_reclaimed_by_peers(any_box: GpuBox) -> None:
    c = any_box.container("c", [(0, SLICE, 100)])
    victim = any_box.start(c, "probe", "hold", str(32 * MiB))
    _wait_line(victim, "held")
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    snap = region.read_region(c.region_dir)
    assert snap.devices[0].memory_used == 32 * MiB + CONTEXT_MIB * MiB
    assert snap.live_slots == ()
    # The next process of the container reclaims the dead one's charge before it starts.
    proc = any_box.run(c, "captest", "alloc")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"filled={SLICE - CONTEXT_MIB * MiB}" in proc.stdout


def test_sigkilled_process_memory_is_reclaimed_by_the_agent(box: GpuBox) -> None:
    c = box.container("c", [(0, SLICE, 100)])
    victim = box.start(c, "probe", "hold", str(32 * MiB))
    _wait_line(victim, "held")
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    assert region.reclaim_dead(c.region_dir) == 32 * MiB + CONTEXT_MIB * MiB
    assert region.reclaim_dead(c.region_dir) == 0  # idempotent
    assert region.read_region(c.region_dir).devices[0].memory_used == 0
