"""Collects what the agent reports: per GPU (NVML) and per pod (its claim's shared region).

Each prepared claim has a region folder the interception core accounts in. `collect()` reads
every region, reclaims slots of dead processes, turns cumulative counters into rates between
two samples (compute share used over the last interval) and cross-checks NVML per-process
memory: a claim whose processes together hold more than its slice's cap plus the tolerance
has, if enforcement is on, as many of them stopped as bring it back within the cap (the whole
over-charge, in one tick), and a pod process on a GPU the pod has no claim on is stopped; a
claim over its compute share for a window has its pods throttled to the share
(nodeagent/throttle.py). Processes are attributed by their pod cgroup, read from any of their
threads (nodeagent/owners.py), so one that never loaded the core is caught too; a region's
pids (the container's own PID namespace) are matched through NSpid. simgpu's NVML reports
per-process memory as a real driver does, so the cross-check runs on the simulated GPU too;
its SIMGPU_DRIVER_OVERHEAD_PERMILLE fault injection (test-only) makes NVML see more than the
core charged, to exercise this backstop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from nodeagent import owners, region
from nodeagent.checkpoint import Checkpoint, PreparedClaim
from nodeagent.compute_watch import ComputeWatch, next_duty
from nodeagent.discovery import GpuInfo
from nodeagent.slice_usage import IdleTracker, SliceUsage
from nodeagent.throttle import CGROUP_ROOT, Throttle, pod_freezers
from tranche.agent_protocol import Finding, GpuReport, PodReport

log = logging.getLogger(__name__)
MIB = 1024**2
FINDINGS_KEPT = 64
# How long the tenant's live page says why the backstop stopped processes of a pod (a
# throttled pod says so for as long as it is held).
STOP_SHOWN_S = 600.0


@dataclass
class Collector:
    """Samples regions and NVML; keeps the previous sample to compute compute-share rates."""

    node: str
    checkpoint: Checkpoint
    gpus: list[GpuInfo]
    nvml_process_memory: object = None  # callable(uuid) -> {pid: bytes}, None: no cross-check
    # callable(uuid) -> {pid: SM utilisation %}, None: compute not watched
    nvml_process_utilisation: object = None
    compute: ComputeWatch = field(default_factory=ComputeWatch)
    tolerance_bytes: int = 256 * 1024**2
    kill_offenders: bool = False
    proc: Path = owners.PROC  # where processes' cgroups are read (the host's /proc)
    cgroup_root: Path = CGROUP_ROOT  # the host's cgroup mount: the pods' freezers
    # Holds claims over their compute share to it (nodeagent/throttle.py); None: a new one
    throttle: Throttle | None = None
    # pod uid -> True (a tenant's) / False (the operator's) / None (unknown); None: all tenants'
    tenant_pod: object = None
    _prev: dict[str, tuple[float, int]] = field(default_factory=dict)
    # What support must see, until the next status message takes it (bounded: newest kept).
    _findings: deque = field(default_factory=lambda: deque(maxlen=FINDINGS_KEPT))
    # (claim uid, GPU) disagreeing at the last check: reported once while it lasts, not per tick
    _disagreeing: set = field(default_factory=set)
    # Backstop actions since start, by reason ("over-cap", "no-claim"): the metrics' counter
    backstop_actions: dict = field(default_factory=dict)
    # What the last collect() saw per slice, for /metrics (nodeagent/slice_usage.py)
    slices: list = field(default_factory=list)
    _idle: IdleTracker = field(default_factory=IdleTracker)
    # claim uid -> (why the backstop acted on it, in the tenant's words; shown until, monotonic)
    _enforcement: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.throttle is None:
            self.throttle = Throttle()
        # Pod and namespace pid of each GPU process, per (pid, start time): nodeagent/owners.py
        self._owners = owners.Owners(self.proc)
        # Whether a region slot's owner runs when its lock is free: one /proc scan a tick at most
        self._liveness = region.Liveness()

    def take_findings(self) -> list[Finding]:
        """The findings since the last call, oldest first (the next status message sends them)."""
        out = []
        while self._findings:  # popleft, not copy+clear: the gRPC threads append meanwhile
            out.append(self._findings.popleft())
        return out

    def prepare_failed(self, namespace: str, claim: str, error: str) -> None:
        """The DRA plugin could not prepare a claim (the kubelet retries; support must know)."""
        self.report("prepare-failed", namespace, claim, error)

    def report(self, kind: str, namespace: str, subject: str, detail: str, **extra) -> None:
        """Queue one finding for support (`tranche.agent_protocol.Finding`), fields bounded;
        `extra`: its optional fields (`gpu`, `xid`)."""
        self._findings.append(
            Finding(kind=kind, ts=time.time(), namespace=(namespace or "-")[:63],
                    subject=(subject or "-")[:253], detail=detail[:500], **extra)
        )  # fmt: skip

    def _read(self, claim: PreparedClaim) -> region.RegionSnapshot | None:
        """Snapshot the claim's region, first reclaiming the slots of processes that died (only
        when the snapshot shows one: reclaiming maps and locks the region); None before the
        first GPU call."""
        try:
            snapshot = region.read_region(claim.region_dir, self._liveness)
            if all(s.alive for s in snapshot.slots):
                return snapshot
            freed = region.reclaim_dead(claim.region_dir)  # checks each owner afresh, locked
            if freed:
                log.info("claim %s: reclaimed %d bytes of dead processes", claim.uid, freed)
            return region.read_region(claim.region_dir, region.Liveness())
        except region.RegionMissingError:  # no GPU call yet, or unprepared meanwhile
            return None
        except region.RegionError as exc:
            log.warning("claim %s: %s", claim.uid, exc)
            return None
        except FileNotFoundError:  # unprepared meanwhile (its pod evicted): nothing to read
            return None

    def cross_check(self, readings: dict[str, region.RegionSnapshot | None]) -> list[str]:
        """NVML's view of every process on each GPU against the slices sold on it; returns the
        findings (and stops offenders when enforcement is on). `readings`: claim uid -> region.

        A process is charged to a claim when it runs in one of the claim's pods (its cgroup:
        whether or not it loaded the core, see nodeagent/owners.py) or, outside every pod
        cgroup (simulation mode), when it holds a slot in the claim's region. A process in a
        pod with no claim on that GPU got the GPU by a path that was not sold. Host processes
        are not a tenant's and are left alone."""
        if self.nvml_process_memory is None and self.nvml_process_utilisation is None:
            return []
        findings: list[str] = []
        disagreeing: set[tuple[str, str]] = set()
        claims = [c for c in self.checkpoint.all() if c.uid in readings]
        whose: dict[int, tuple[str | None, int]] = {}  # this tick's answers, shared by GPUs
        listed_at = owners.boot_ticks()  # before NVML is asked: a later-born pid is not its
        for gpu in self.gpus:
            on_gpu = [c for c in claims if any(d.uuid == gpu.uuid for d in c.devices)]
            by_pod = {pod.split("/")[2]: c for c in on_gpu for pod in c.pods if pod.count("/") == 2}
            by_slot = {s.pid: c for c in on_gpu for s in _live_slots(readings[c.uid])}

            def owner(pid: int, by_pod=by_pod, by_slot=by_slot) -> tuple:
                """(claim or None, pod uid or None, accounted in the claim's region)."""
                if pid not in whose:
                    whose[pid] = self._owners(pid, listed_at)
                pod, inner = whose[pid]
                in_slot = by_slot.get(inner)
                claim = by_pod.get(pod) if pod else in_slot
                return claim, pod, in_slot is claim

            if self.nvml_process_memory is not None:
                findings += self._check_memory(gpu, on_gpu, owner, readings, disagreeing)
            if self.nvml_process_utilisation is not None:
                findings += self._check_compute(gpu, on_gpu, owner)
        self._disagreeing = disagreeing
        self._owners.keep_only(set(whose))
        live = {(c.uid, d.uuid) for c in claims for d in c.devices}
        self.compute.forget(live)
        for key in self.throttle.held_keys():
            if key not in live:  # its pods are gone: nothing left to freeze
                self.throttle.release(key)
        for uid in [u for u in self._enforcement if u not in {c.uid for c in claims}]:
            del self._enforcement[uid]
        for f in findings:
            log.warning("backstop: %s", f)
        return findings

    def _check_memory(self, gpu, on_gpu, owner, readings, disagreeing: set) -> list[str]:
        """NVML's per-process memory on `gpu` against each claim's cap (see cross_check)."""
        findings: list[str] = []
        held: dict[str, dict[int, int]] = {}
        bypassed: set[int] = set()  # processes not accounted in their claim's region
        for pid, used in self.nvml_process_memory(gpu.uuid).items():
            claim, pod, accounted = owner(pid)
            if claim is not None and not accounted:
                bypassed.add(pid)
            if claim is not None:
                held.setdefault(claim.uid, {})[pid] = used
            elif pod is not None:
                findings.extend(self._unclaimed(pod, pid, used, gpu.uuid))
        for claim in on_gpu:
            pids = held.get(claim.uid, {})
            limit = next(d.memory_bytes for d in claim.devices if d.uuid == gpu.uuid)
            total = sum(pids.values())
            if total <= limit + self.tolerance_bytes:
                continue
            victims = over_charge(pids, bypassed, limit)
            findings.append(
                f"claim {claim.uid} uses {total} B on {gpu.uuid} over its {limit} B cap; "
                + (f"offending pid {victims[0]}" if len(victims) == 1
                   else "offending pids " + " ".join(map(str, victims)))
            )  # fmt: skip
            disagreeing.add((claim.uid, gpu.uuid))
            if (claim.uid, gpu.uuid) not in self._disagreeing:
                self._disagree(claim, gpu.uuid, total, readings[claim.uid])
            freed = sum(pids[p] for p in victims)
            told = (f"{len(victims)} of its processes holding {freed // MIB} MiB of GPU memory "
                    f"were stopped at {_clock()}: the pod's processes held {total // MIB} MiB "
                    f"on a {limit // MIB} MiB slice")  # fmt: skip
            if self._stop(victims, claim.namespace, _pod_of(claim),
                          f"claim {claim.name} held {total // MIB} MiB on {gpu.uuid}, cap "
                          f"{limit // MIB} MiB", "over-cap"):  # fmt: skip
                self._enforcement[claim.uid] = (told, time.monotonic() + STOP_SHOWN_S)
        return findings

    def _check_compute(self, gpu, on_gpu, owner) -> list[str]:
        """NVML's per-process SM utilisation on `gpu`, summed per claim, against its share over
        the compute watch's window (nodeagent/compute_watch.py); a claim over it for a whole
        window has its pods throttled to the share (nodeagent/throttle.py) for the watch's hold,
        the freezer's duty steered each tick from what NVML shows meanwhile."""
        findings: list[str] = []
        busy: dict[str, dict[int, float]] = {}
        for pid, percent in self.nvml_process_utilisation(gpu.uuid).items():
            claim = owner(pid)[0]
            if claim is not None:
                busy.setdefault(claim.uid, {})[pid] = percent
        now = time.monotonic()
        for claim in on_gpu:
            key = (claim.uid, gpu.uuid)
            share = next(d.compute_percent for d in claim.devices if d.uuid == gpu.uuid)
            used = busy.get(claim.uid, {})
            hold = self.throttle.held(key)
            if hold is not None:
                if now < hold.until:
                    self.throttle.set_duty(key, next_duty(hold.duty, sum(used.values()), share))
                    continue
                self.throttle.release(key)
                self.compute.restart(key)
                log.info("claim %s on %s: compute hold over", claim.uid, gpu.uuid)
            mean = self.compute.observe(now, key, used, share)
            if mean is None:
                continue
            why = (f"claim {claim.name} used {mean:.0f} % of {gpu.uuid} over "
                   f"{self.compute.window_s:g} s, its share {share} % "
                   f"(tolerance {self.compute.tolerance_points:g} points)")  # fmt: skip
            findings.append(f"{why}; pids " + " ".join(map(str, sorted(used))))
            if self.kill_offenders:
                self._hold(claim, gpu.uuid, used, share=share, mean=mean, why=why)
        return findings

    def _hold(self, claim, uuid: str, used: dict[int, float], *, share: int, mean: float,
              why: str) -> None:  # fmt: skip
        """Throttle the claim's pods to `share` for the watch's hold; a claim whose processes
        are in no pod cgroup (simulation mode, attributed by region slot) has its busiest
        process stopped instead: there is no cgroup of the claim's to hold."""
        texts = [t for pid in used for t in owners.cgroup_texts(pid, self.proc)]
        freezers = pod_freezers(texts, self.cgroup_root)
        if not freezers:
            self._stop([max(used, key=used.get)], claim.namespace, _pod_of(claim), why,
                       "over-share")  # fmt: skip
            return
        key = (claim.uid, uuid)
        hold_s = self.compute.hold_s(key)
        until = time.time() + hold_s
        told = (f"GPU compute held to its {share} % share until {_clock(until)}: the pod's "
                f"processes used {mean:.0f} % of the GPU over {self.compute.window_s:g} s, "
                f"work the slice's meter could not see")  # fmt: skip
        self.throttle.hold(key, freezers, share / 100.0, time.monotonic() + hold_s, told)
        self._enforcement[claim.uid] = (told, time.monotonic() + hold_s)
        self.backstop_actions["over-share"] = self.backstop_actions.get("over-share", 0) + 1
        self.report("backstop-throttled", claim.namespace, _pod_of(claim),
                    f"held to {share} % for {hold_s:g} s: {why}")  # fmt: skip

    def _unclaimed(self, pod: str, pid: int, used: int, uuid: str) -> list[str]:
        """A pod process on a GPU its pod holds no claim on: a tenant's is stopped, the
        operator's own pods are left alone, and one nobody can place now is only reported."""
        tenant = True if self.tenant_pod is None else self.tenant_pod(pod)
        if tenant is False:
            log.info("pod %s (not a tenant's) uses %d B on %s: left alone", pod, used, uuid)
            return []
        finding = f"pod {pod} uses {used} B on {uuid} without a claim on it; offending pid {pid}"
        if tenant is None:
            return [f"{finding}; whose pod it is is unknown now, not stopped"]
        self._stop([pid], "", pod, f"no claim on {uuid} ({used // MIB} MiB)", "no-claim")
        return [finding]

    def _disagree(
        self, claim: PreparedClaim, uuid: str, nvml_bytes: int, reading: region.RegionSnapshot
    ) -> None:
        charged = sum(d.memory_used for d in reading.devices if d.uuid == uuid) if reading else 0
        limit = next(d.memory_bytes for d in claim.devices if d.uuid == uuid)
        self.report(
            "nvml-disagrees", claim.namespace, _pod_of(claim),
            f"on {uuid} NVML sees {nvml_bytes // MIB} MiB held by claim {claim.name}'s "
            f"processes, the core charged {charged // MIB} MiB (cap {limit // MIB} MiB, "
            f"tolerance {self.tolerance_bytes // MIB} MiB)",
        )  # fmt: skip

    def _stop(self, pids: list[int], namespace: str, pod: str, why: str, reason: str) -> bool:
        """SIGKILL `pids` (a process whose leader left by SYS_exit is killed whole by its pid:
        the signal goes to the thread group); one finding for them all. True if any was."""
        if not self.kill_offenders:
            return False
        stopped = []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                stopped.append(pid)
        if stopped:
            self.backstop_actions[reason] = self.backstop_actions.get(reason, 0) + len(stopped)
            self.report("backstop-stopped", namespace, pod,
                        f"stopped pid {' '.join(map(str, stopped))}: {why}")  # fmt: skip
        return bool(stopped)

    def enforcement(self, claim_uid: str) -> str:
        """Why the backstop holds or recently stopped the claim's processes, in the tenant's
        words; "" when it does not."""
        told, until = self._enforcement.get(claim_uid, ("", 0.0))
        if time.monotonic() < until:
            return told
        self._enforcement.pop(claim_uid, None)
        return ""

    def close(self) -> None:
        """Thaw every pod the compute backstop holds (the agent is stopping)."""
        self.throttle.close()

    def collect(self) -> tuple[list[GpuReport], dict[tuple[str, str], PodReport]]:
        """(gpus, pods keyed by (namespace, pod)) as the message schema types them."""
        now = time.monotonic()
        pods: dict[tuple[str, str], dict] = {}
        used_per_gpu: dict[str, int] = {}
        claims = self.checkpoint.all()
        self._liveness.tick()
        readings = {c.uid: self._read(c) for c in claims}
        self.cross_check(readings)
        self.slices = self._slice_usage(now, claims, readings)
        idle = {(s.namespace, s.claim, s.gpu_uuid): s.idle_seconds for s in self.slices}
        for claim in claims:
            reading = readings[claim.uid]
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
                    pods[(ns, name)] = PodReport(
                        namespace=ns,
                        pod=name,
                        uid=uid or claim.uid,
                        gpu_uuid=dev.uuid,
                        memory_limit_bytes=dev.memory_bytes,
                        memory_used_bytes=used,
                        rejected_allocations=usage.rejected_allocations if usage else 0,
                        compute_target_percent=dev.compute_percent,
                        compute_used_percent=round(max(0.0, share), 2),
                        throttled_seconds=round((usage.throttled_ns if usage else 0) / 1e9, 3),
                        processes=len(reading.live_slots) if reading else 0,
                        idle_seconds=idle.get((claim.namespace, claim.name, dev.uuid), 0.0),
                        **({"enforcement": told} if (told := self.enforcement(claim.uid)) else {}),
                    )
        gpus = [
            GpuReport(
                uuid=g.uuid,
                name=g.name,
                memory_total_bytes=g.memory_bytes,
                memory_used_bytes=used_per_gpu.get(g.uuid, 0),
                **({"context_bytes": g.context_bytes} if g.context_bytes > 0 else {}),
            )
            for g in self.gpus
        ]
        return gpus, pods

    def _slice_usage(self, now: float, claims, readings) -> list[SliceUsage]:
        models = {g.uuid: g.name for g in self.gpus}
        usages = {}
        for claim in claims:
            reading = readings[claim.uid]
            by_uuid = {d.uuid: d for d in reading.devices} if reading else {}
            for dev in claim.devices:
                usages[f"{claim.uid}/{dev.uuid}"] = (claim, dev, reading, by_uuid.get(dev.uuid))
        seen = self._idle.observe(
            now, {k: u.compute_used_ns if u else 0 for k, (_c, _d, _r, u) in usages.items()}
        )
        out = []
        for key, (claim, dev, reading, usage) in usages.items():
            ratio, idle = seen[key]
            out.append(
                SliceUsage(
                    namespace=claim.namespace, pod=_pod_of(claim), claim=claim.name,
                    gpu_uuid=dev.uuid, gpu_model=models.get(dev.uuid, ""),
                    memory_used_bytes=usage.memory_used if usage else 0,
                    memory_limit_bytes=dev.memory_bytes,
                    compute_target_ratio=dev.compute_percent / 100,
                    compute_used_ratio=round(ratio, 4),
                    rejected_allocations=usage.rejected_allocations if usage else 0,
                    throttled_seconds=(usage.throttled_ns if usage else 0) / 1e9,
                    busy_seconds=(usage.compute_used_ns if usage else 0) / 1e9,
                    contexts=len(reading.live_slots) if reading else 0,
                    slots_in_use=len(reading.slots) if reading else 0,
                    idle_seconds=round(idle, 1),
                )
            )  # fmt: skip
        return out


def over_charge(pids: dict[int, int], bypassed: set[int], limit: int) -> list[int]:
    """The processes to stop so what a claim's processes hold (`pids`: pid -> bytes NVML
    shows) comes back within its cap: those that escaped the core's accounting (`bypassed`)
    first, then the largest, as many as needed in one go; none is spared for being small or
    for a zombie leader (each is a process holding device memory)."""
    order = sorted(pids, key=lambda p: (p not in bypassed, -pids[p], p))
    left, out = sum(pids.values()), []
    for pid in order:
        if left <= limit:
            break
        out.append(pid)
        left -= pids[pid]
    return out


def _clock(at: float | None = None) -> str:
    """A wall-clock time as the tenant reads it: "19:04:12 UTC"."""
    return time.strftime("%H:%M:%S UTC", time.gmtime(time.time() if at is None else at))


def _pod_of(claim: PreparedClaim) -> str:
    """The name of the claim's (first) pod, else the claim's own name."""
    for pod in claim.pods:
        parts = pod.split("/")
        if len(parts) >= 2 and parts[1]:
            return parts[1]
    return claim.name


def _live_slots(reading: region.RegionSnapshot | None) -> list:
    return list(reading.live_slots) if reading else []
