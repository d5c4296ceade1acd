"""A small GPU workload the integration tier runs under the core (also usable on a real GPU).

`python -m nodeagent.sim.workload --memory-gib 10 --duty 0.5 --seconds 60` allocates memory in
1 GiB steps, then launches kernels at the duty cycle until stopped. It talks to libcuda.so.1
through ctypes, so under the interception core every call goes through the core's hooks. One
JSON line per event on stdout ({"event": "alloc", "bytes": …, "result": "CUDA_ERROR_...",
"t": <unix time>}) lets tests and operators see exactly what the core answered, and when.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import time

CUDA_ERRORS = {0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY"}
GIB = 1024**3


def _say(**event: object) -> None:
    sys.stdout.write(json.dumps({**event, "t": round(time.time(), 4)}) + "\n")
    sys.stdout.flush()


def _name(code: int) -> str:
    return CUDA_ERRORS.get(code, f"CUDA_ERROR_{code}")


def _uuid_of(cuda, dev: int) -> str:
    raw = (ctypes.c_ubyte * 16)()
    if cuda.cuDeviceGetUuid(raw, dev) != 0:
        return ""
    h = bytes(raw).hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _pick_device(cuda) -> int:
    """The device NVIDIA_VISIBLE_DEVICES names (the simulated node shows every GPU)."""
    wanted = os.environ.get("NVIDIA_VISIBLE_DEVICES", "").split(",")[0]
    count = ctypes.c_int()
    cuda.cuDeviceGetCount(ctypes.byref(count))
    for i in range(count.value):
        dev = ctypes.c_int()
        cuda.cuDeviceGet(ctypes.byref(dev), i)
        if not wanted.startswith("GPU-") or _uuid_of(cuda, dev.value) == wanted:
            return dev.value
    raise SystemExit(f"workload: GPU {wanted} not visible")


def run(memory_gib: float, duty: float, seconds: float, period: float = 0.1) -> int:
    cuda = ctypes.CDLL("libcuda.so.1")
    rc = cuda.cuInit(0)
    if rc != 0:
        _say(event="init", result=_name(rc))
        return 1
    dev = _pick_device(cuda)
    ctx = ctypes.c_void_p()
    rc = cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev)
    _say(event="context", result=_name(rc))
    if rc != 0:
        return 1
    held, step = 0, GIB
    target = int(memory_gib * GIB)
    while held < target:
        size = min(step, target - held)
        ptr = ctypes.c_uint64()
        rc = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size))
        _say(event="alloc", bytes=size, total=held + (size if rc == 0 else 0), result=_name(rc))
        if rc != 0:
            break  # keep what we have and compute with it, as a real job would
        held += size
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    cuda.cuModuleLoadData(ctypes.byref(mod), b"tranche-workload")
    cuda.cuModuleGetFunction(ctypes.byref(fn), mod, b"spin")
    busy_ns = ctypes.c_uint64(int(duty * period * 1e9))
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(busy_ns), ctypes.c_void_p))
    _say(event="running", held=held, duty=duty)
    deadline = time.monotonic() + seconds if seconds > 0 else float("inf")
    while time.monotonic() < deadline and duty > 0:
        start = time.monotonic()
        rc = cuda.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, None, params, None)
        if rc != 0:
            _say(event="launch", result=_name(rc))
            return 1
        cuda.cuCtxSynchronize()
        time.sleep(max(0.0, period - (time.monotonic() - start)))
    if duty <= 0:
        signal.sigtimedwait([signal.SIGTERM], seconds) if seconds > 0 else signal.pause()
    return 0


def fill_host_memory(mib: int) -> bytearray:
    """Allocate and touch `mib` MiB of host RAM (the container's, not the GPU's), 64 MiB at a
    time, saying how far it got: past the container's limit the kernel kills the process."""
    held = bytearray()
    step = 64 * 1024 * 1024
    while len(held) < mib * 1024 * 1024:
        held += b"\x01" * step
        _say(event="host-alloc", total_mib=len(held) // (1024 * 1024))
    return held


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--memory-gib", type=float, default=1.0)
    p.add_argument("--duty", type=float, default=0.5, help="fraction of time launching, 0..1")
    p.add_argument("--seconds", type=float, default=0, help="0: until SIGTERM")
    p.add_argument("--host-memory-mib", type=int, default=0, help="host RAM to fill first")
    a = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if a.host_memory_mib:
        _held = fill_host_memory(a.host_memory_mib)  # kept for the life of the workload
    return run(a.memory_gib, min(max(a.duty, 0.0), 1.0), a.seconds)


if __name__ == "__main__":
    sys.exit(main())
