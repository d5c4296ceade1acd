"""GPU discovery through NVML (pynvml): the same calls work on a real driver and on simgpu.

`discover()` returns one frozen `GpuInfo` per GPU. Optional NVML queries that a driver (or the
simulated one) does not support degrade to a neutral value instead of failing discovery, because
a missing MIG query must never hide a usable GPU from the scheduler.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

# nvmlDeviceGetArchitecture codes (nvml.h NVML_DEVICE_ARCH_*).
ARCHITECTURES = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada",
    9: "Hopper",
    10: "Blackwell",
}
# Fallback by compute capability major version when the architecture query is unsupported.
ARCH_BY_CC_MAJOR = {3: "Kepler", 5: "Maxwell", 6: "Pascal", 7: "Volta", 8: "Ampere", 9: "Hopper"}


@dataclass(frozen=True)
class GpuInfo:
    """What the agent publishes and prepares for one physical GPU."""

    index: int
    minor: int
    name: str
    uuid: str
    memory_bytes: int
    compute_capability: str
    architecture: str
    driver_version: str
    cuda_version: str
    sm_count: int
    mig_enabled: bool
    # Device memory one CUDA context takes on this GPU, measured at discovery; 0 = unknown (the
    # slice config then carries the conservative default floor).
    context_bytes: int = 0

    @property
    def device_name(self) -> str:
        """The DRA device name: DNS label, stable across restarts for the same index."""
        return f"gpu-{self.index}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _optional(fn: Callable[[], T], default: T, what: str) -> T:
    import pynvml

    try:
        return fn()
    except pynvml.NVMLError as exc:
        log.debug("NVML %s unsupported (%s); using %r", what, exc, default)
        return default


def _cuda_version(code: int) -> str:
    return f"{code // 1000}.{(code % 1000) // 10}" if code else ""


def discover() -> list[GpuInfo]:
    """Enumerate GPUs; raises pynvml.NVMLError only if NVML itself cannot start."""
    import pynvml

    pynvml.nvmlInit()
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = _cuda_version(_optional(pynvml.nvmlSystemGetCudaDriverVersion, 0, "CUDA version"))
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            major, minor_cc = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            arch_code = _optional(lambda h=h: pynvml.nvmlDeviceGetArchitecture(h), -1, "arch")
            arch = ARCHITECTURES.get(arch_code) or ARCH_BY_CC_MAJOR.get(major, "Unknown")
            mig = _optional(lambda h=h: pynvml.nvmlDeviceGetMigMode(h)[0], 0, "MIG mode")
            gpus.append(
                GpuInfo(
                    index=index,
                    minor=_optional(lambda h=h: pynvml.nvmlDeviceGetMinorNumber(h), index, "minor"),
                    name=_text(pynvml.nvmlDeviceGetName(h)),
                    uuid=_text(pynvml.nvmlDeviceGetUUID(h)),
                    memory_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
                    compute_capability=f"{major}.{minor_cc}",
                    architecture=arch,
                    driver_version=driver,
                    cuda_version=cuda,
                    sm_count=_optional(
                        lambda h=h: pynvml.nvmlDeviceGetNumGpuCores(h) // 64, 0, "SM count"
                    ),
                    mig_enabled=bool(mig),
                    context_bytes=_context_of_model(_text(pynvml.nvmlDeviceGetName(h)), h),
                )
            )
        return gpus
    finally:
        pynvml.nvmlShutdown()


_nvml_kept = threading.Lock()
_nvml_handles: dict[str, Any] = {}  # GPU UUID -> NVML handle, NVML initialised once for them


def process_memory(uuid: str) -> dict[int, int]:
    """Per-process used GPU memory (pid -> bytes) for one GPU; empty when NVML cannot tell.

    The backstop asks this for every GPU every tick, so NVML is initialised once (on the first
    call) and kept, with each GPU's handle: an init costs milliseconds on a real driver."""
    import pynvml

    h = _kept_handle(uuid)
    procs = _optional(lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(h), [], "procs")
    return {int(p.pid): int(p.usedGpuMemory or 0) for p in procs}


def _kept_handle(uuid: str):
    """The NVML handle of one GPU, kept for the life of the process (see `process_memory`)."""
    import pynvml

    with _nvml_kept:
        h = _nvml_handles.get(uuid)
        if h is None:
            if not _nvml_handles:
                pynvml.nvmlInit()  # never shut down: held for the life of the process
            h = _nvml_handles[uuid] = pynvml.nvmlDeviceGetHandleByUUID(uuid)
    return h


def process_utilisation(uuid: str) -> dict[int, float]:
    """Per-process SM utilisation (pid -> percent) for one GPU: each process's latest sample
    (`nvmlDeviceGetProcessUtilization`); empty when NVML has none or cannot tell."""
    import pynvml

    h = _kept_handle(uuid)
    try:
        samples = pynvml.nvmlDeviceGetProcessUtilization(h, 0)
    except pynvml.NVMLError as exc:  # NOT_FOUND: no process ran since; others: cannot tell
        if exc.value != pynvml.NVML_ERROR_NOT_FOUND:
            log.warning("per-process utilisation of %s unavailable: %s", uuid, exc)
        return {}
    latest: dict[int, tuple[int, float]] = {}
    for s in samples:
        if int(s.pid) not in latest or int(s.timeStamp) > latest[int(s.pid)][0]:
            latest[int(s.pid)] = (int(s.timeStamp), float(s.smUtil))
    return {pid: pct for pid, (_, pct) in latest.items()}


def utilisation(uuid: str) -> int | None:
    """NVML's whole-GPU utilisation (percent of time a kernel ran, its last sample period), or
    None when NVML cannot tell."""
    import pynvml

    h = _kept_handle(uuid)
    rates = _optional(lambda: pynvml.nvmlDeviceGetUtilizationRates(h), None, "utilisation")
    return None if rates is None else int(rates.gpu)


_measured_by_model: dict[str, int] = {}


def _context_of_model(name: str, handle: Any) -> int:
    """A context's footprint depends on the GPU model (and driver): measured once per model."""
    import pynvml

    if not _measured_by_model.get(name):
        _measured_by_model[name] = measure_context_bytes(_text(pynvml.nvmlDeviceGetUUID(handle)))
    return _measured_by_model[name]


def measure_context_bytes(uuid: str) -> int:
    """Device memory one CUDA context takes on the GPU with this UUID, or 0 if it cannot be
    measured (no CUDA driver, NVML does not list this process).

    Creates one context through the driver API (ctypes; the GPU's CUDA ordinal is found by UUID)
    and reads this process's usage from NVML before and after, the same measure the core uses.
    The core charges at least this much per context, whatever its own measurement says.
    """
    import ctypes

    import pynvml

    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    if cu.cuInit(0) != 0:
        return 0
    count = ctypes.c_int()
    if cu.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    want = bytes.fromhex(uuid.removeprefix("GPU-").replace("-", ""))
    for ordinal in range(count.value):
        dev, raw = ctypes.c_int(), ctypes.create_string_buffer(16)
        if cu.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
            continue
        if cu.cuDeviceGetUuid(raw, dev) != 0 or raw.raw != want:
            continue
        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            before = _own_usage(h)
            ctx = ctypes.c_void_p()
            if cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) != 0:
                return 0
            after = _own_usage(h)
            cu.cuCtxDestroy_v2(ctx)
        finally:
            pynvml.nvmlShutdown()
        return max(after - before, 0) if after is not None else 0
    return 0


def _own_usage(handle: Any) -> int | None:
    """This process's used memory on the GPU as NVML lists it; 0 when not listed (nothing held)."""
    import os

    import pynvml

    procs = _optional(lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(handle), None, "procs")
    if procs is None:
        return None
    return next((int(p.usedGpuMemory or 0) for p in procs if p.pid == os.getpid()), 0)
