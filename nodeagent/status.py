"""Collects what the agent reports: per GPU (NVML) and per pod (its claim's shared region).

Each prepared claim has a region folder the interception core accounts in. `collect()` reads
every region, reclaims slots of dead processes, turns cumulative counters into rates between
two samples (compute share used over the last interval) and cross-checks NVML per-process
memory: a process above its slice's cap by more than the tolerance is reported and, if
enforcement is on, stopped. On the simulated GPU NVML cannot attribute memory to processes,
so the cross-check finds nothing there (the core's own cap still applies).
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import signal
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

from nodeagent.checkpoint import Checkpoint, PreparedClaim
from nodeagent.discovery import GpuInfo

log = logging.getLogger(__name__)

# Layout of nodeagent/native/src/region.h (tr_region_t v1). Read here only until issue 4's
# nodeagent/region.py lands; `_region_module()` prefers it when present.
MAGIC, HEADER, DEVICE_OFF, DEVICE_SIZE, SLOT_OFF, SLOT_SIZE = 0x47525254, 11360, 96, 128, 2144, 144
REGION_FILE = "region.bin"


@dataclass(frozen=True)
class DeviceUsage:
    uuid: str
    memory_limit: int
    memory_used: int
    rejected: int
    compute_percent: int
    compute_used_ns: int
    throttled_ns: int


@dataclass(frozen=True)
class RegionReading:
    devices: tuple[DeviceUsage, ...]
    pids: tuple[int, ...]


def _region_module():
    try:
        from nodeagent import region  # type: ignore[attr-defined]  (issue 4)
    except ImportError:
        return None
    return region


def read_region(region_dir: Path) -> RegionReading | None:
    """One consistent-enough reading (atomics read one by one; figures are monitoring)."""
    path = region_dir / REGION_FILE
    if not path.exists():
        return None  # no process of the container has touched the GPU yet
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size < HEADER:
            return None
        with mmap.mmap(f.fileno(), HEADER, access=mmap.ACCESS_READ) as m:
            magic, major, _minor, _hs, ndev, nslots = struct.unpack_from("<IHHIII", m, 0)
            if magic != MAGIC or major != 1:
                log.warning("%s: not a v1 region (magic %#x major %d)", path, magic, major)
                return None
            devices = []
            for i in range(min(ndev, 16)):
                off = DEVICE_OFF + i * DEVICE_SIZE
                uuid = m[off : off + 48].split(b"\0", 1)[0].decode()
                limit, used, rejected, _peak = struct.unpack_from("<QQQQ", m, off + 48)
                (percent,) = struct.unpack_from("<I", m, off + 80)
                c_used, throttled = struct.unpack_from("<QQ", m, off + 104)
                devices.append(DeviceUsage(uuid, limit, used, rejected, percent, c_used, throttled))
            pids = tuple(
                p
                for s in range(min(nslots, 64))
                if (p := struct.unpack_from("<I", m, SLOT_OFF + s * SLOT_SIZE)[0])
            )
    return RegionReading(tuple(devices), pids)


@dataclass
class Collector:
    """Samples regions and NVML; keeps the previous sample to compute compute-share rates."""

    node: str
    checkpoint: Checkpoint
    gpus: list[GpuInfo]
    nvml_process_memory: object = None  # callable(uuid) -> {pid: bytes}, None: no cross-check
    tolerance_bytes: int = 256 * 1024**2
    kill_offenders: bool = False
    _prev: dict[str, tuple[float, int]] = field(default_factory=dict)

    def _reclaim(self, claim: PreparedClaim) -> None:
        region = _region_module()
        if region is not None and hasattr(region, "reclaim_dead"):
            try:
                region.reclaim_dead(claim.region_dir)
            except Exception:
                log.exception("reclaiming dead slots of claim %s failed", claim.uid)

    def _cross_check(self, claim: PreparedClaim, reading: RegionReading) -> list[str]:
        """NVML's view per process vs the slice cap; returns findings (and stops offenders)."""
        if self.nvml_process_memory is None:
            return []
        findings = []
        limits = {d.uuid: d.memory_bytes for d in claim.devices}
        for uuid, limit in limits.items():
            per_pid = self.nvml_process_memory(uuid)
            held = {pid: b for pid, b in per_pid.items() if pid in reading.pids}
            if sum(held.values()) > limit + self.tolerance_bytes:
                worst = max(held, key=held.get)
                findings.append(
                    f"claim {claim.uid} uses {sum(held.values())} B on {uuid} over its "
                    f"{limit} B cap; offending pid {worst}"
                )
                if self.kill_offenders:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(worst, signal.SIGKILL)
        for f in findings:
            log.warning("backstop: %s", f)
        return findings

    def collect(self) -> tuple[list[dict], dict[tuple[str, str], dict]]:
        """(gpus, pods keyed by (namespace, pod)) in the portal protocol's field names."""
        now = time.monotonic()
        pods: dict[tuple[str, str], dict] = {}
        used_per_gpu: dict[str, int] = {}
        for claim in self.checkpoint.all():
            self._reclaim(claim)
            reading = read_region(Path(claim.region_dir))
            self._cross_check(claim, reading) if reading else None
            by_uuid = {d.uuid: d for d in reading.devices} if reading else {}
            for dev in claim.devices:
                usage = by_uuid.get(dev.uuid)
                used = usage.memory_used if usage else 0
                used_per_gpu[dev.uuid] = used_per_gpu.get(dev.uuid, 0) + used
                c_used = usage.compute_used_ns if usage else 0
                key = f"{claim.uid}/{dev.uuid}"
                t0, c0 = self._prev.get(key, (now, c_used))
                self._prev[key] = (now, c_used)
                share = 100.0 * (c_used - c0) / ((now - t0) * 1e9) if now > t0 else 0.0
                for pod in claim.pods:
                    ns, name, uid = ([*pod.split("/"), "", ""])[:3]
                    pods[(ns, name)] = {
                        "namespace": ns,
                        "pod": name,
                        "uid": uid or claim.uid,
                        "gpu_uuid": dev.uuid,
                        "memory_limit_bytes": dev.memory_bytes,
                        "memory_used_bytes": used,
                        "rejected_allocations": usage.rejected if usage else 0,
                        "compute_target_percent": dev.compute_percent,
                        "compute_used_percent": round(max(0.0, share), 2),
                        "throttled_seconds": round((usage.throttled_ns if usage else 0) / 1e9, 3),
                        "processes": len(reading.pids) if reading else 0,
                    }
        gpus = [
            {
                "uuid": g.uuid,
                "name": g.name,
                "memory_total_bytes": g.memory_bytes,
                "memory_used_bytes": used_per_gpu.get(g.uuid, 0),
            }
            for g in self.gpus
        ]
        return gpus, pods
