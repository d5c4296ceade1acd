"""Collects what the agent reports: per GPU (NVML) and per pod (its claim's shared region).

Each prepared claim has a region folder the interception core accounts in. `collect()` reads
every region, reclaims slots of dead processes, turns cumulative counters into rates between
two samples (compute share used over the last interval) and cross-checks NVML per-process
memory: a process above its slice's cap by more than the tolerance is reported and, if
enforcement is on, stopped. simgpu's NVML reports per-process memory as a real driver does, so
the cross-check runs on the simulated GPU too; its SIMGPU_DRIVER_OVERHEAD_PERMILLE fault
injection (test-only) makes NVML see more than the core charged, to exercise this backstop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass, field

from nodeagent import region
from nodeagent.checkpoint import Checkpoint, PreparedClaim
from nodeagent.discovery import GpuInfo

log = logging.getLogger(__name__)


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

    def _read(self, claim: PreparedClaim) -> region.RegionSnapshot | None:
        """Reclaim dead processes' slots, then snapshot; None before the first GPU call."""
        if not region.region_path(claim.region_dir).exists():
            return None
        try:
            freed = region.reclaim_dead(claim.region_dir)
            if freed:
                log.info("claim %s: reclaimed %d bytes of dead processes", claim.uid, freed)
            return region.read_region(claim.region_dir)
        except region.RegionError as exc:
            log.warning("claim %s: %s", claim.uid, exc)
            return None

    def _cross_check(self, claim: PreparedClaim, reading: region.RegionSnapshot) -> list[str]:
        """NVML's view per process vs the slice cap; returns findings (and stops offenders)."""
        if self.nvml_process_memory is None:
            return []
        findings = []
        limits = {d.uuid: d.memory_bytes for d in claim.devices}
        for uuid, limit in limits.items():
            per_pid = self.nvml_process_memory(uuid)
            pids = {s.pid for s in reading.live_slots}
            held = {pid: b for pid, b in per_pid.items() if pid in pids}
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
            reading = self._read(claim)
            if reading:
                self._cross_check(claim, reading)
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
                        "rejected_allocations": usage.rejected_allocations if usage else 0,
                        "compute_target_percent": dev.compute_percent,
                        "compute_used_percent": round(max(0.0, share), 2),
                        "throttled_seconds": round((usage.throttled_ns if usage else 0) / 1e9, 3),
                        "processes": len(reading.live_slots) if reading else 0,
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
