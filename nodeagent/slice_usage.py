"""Per-slice usage the agent's /metrics serves: kernel-busy time, slots, contexts, idleness.

The interception core already accounts every launch's device time in the claim's region
(`compute_used_ns`, the completed-work meter of `hooks_cuda_launch.c`): that counter *is* the
slice's kernel-busy time, the per-slice analogue of SM activity that no whole-GPU exporter can
split. This module reads nothing new from the region; it keeps, per (claim, GPU), the cumulative
busy seconds and since when the slice has been idle (busy under `IDLE_BELOW` of wall time each
tick), so `rate(tranche_slice_kernel_busy_seconds_total[1m])` per slice sums to the card's busy
fraction and an idle slice is a fact the alert and the tenant's page read.
"""

from __future__ import annotations

from dataclasses import dataclass

# Below this busy fraction of a tick's wall time a slice counts as idle: a process that only
# holds its context (a model loaded, no requests) launches nothing and scores 0.
IDLE_BELOW = 0.01


@dataclass(frozen=True)
class SliceUsage:
    """One slice (a claim's share of one GPU) as /metrics exports it; labels bounded."""

    namespace: str
    pod: str
    claim: str
    gpu_uuid: str
    gpu_model: str
    memory_used_bytes: int
    memory_limit_bytes: int
    compute_target_ratio: float  # the share sold
    compute_used_ratio: float  # busy time over wall time since the previous tick
    rejected_allocations: int
    throttled_seconds: float
    busy_seconds: float  # cumulative device time of the slice's kernels
    contexts: int  # live processes holding a CUDA context in the claim's region
    slots_in_use: int  # region slots taken (live, or dead and not yet reclaimed)
    idle_seconds: float  # how long the slice has been idle (0 while busy)


class IdleTracker:
    """Since when each slice has been idle; keys that were not seen in a tick are dropped."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, int, float]] = {}  # key -> (t, busy_ns, idle_since)

    def observe(self, now: float, samples: dict[str, int]) -> dict[str, tuple[float, float]]:
        """`samples`: key -> cumulative busy ns at `now`; returns key -> (busy fraction since
        the previous tick, idle seconds)."""
        out: dict[str, tuple[float, float]] = {}
        nxt: dict[str, tuple[float, int, float]] = {}
        for key, busy in samples.items():
            t0, b0, since = self._last.get(key, (now, busy, now))
            ratio = max(0.0, (busy - b0) / ((now - t0) * 1e9)) if now > t0 else 0.0
            if ratio >= IDLE_BELOW:
                since = now
            nxt[key] = (now, busy, since)
            out[key] = (ratio, now - since)
        self._last = nxt
        return out
