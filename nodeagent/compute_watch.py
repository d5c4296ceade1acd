"""The compute half of the NVML backstop: each claim's share of a GPU, as NVML's per-process
utilisation shows it, against the share that was sold.

The interception core meters compute inside each process; a process that launches work the
core never sees (the driver's entry points read from libcuda's symbol table, a static binary,
raw ioctls) is metered by nothing. Every tick the collector (`nodeagent/status.py`) sums NVML's
per-process SM utilisation (`nvmlDeviceGetProcessUtilization`) over the processes it attributes
to each claim, as it does for memory, and hands the sum to `ComputeWatch.observe`. A claim whose
mean over the last `window_s` seconds is above its share by more than `tolerance_points` is
over its share for the whole window: its busiest process is stopped (SIGKILL, by the
collector) and the claim's history starts afresh, so each further stop needs a window of its
own. Honest programs held to their share by the core (within 3 points of it) never come near
the tolerance; a burst (the core's 10 ms budget) moves a window's mean by a fraction of a point.

What this cannot see: work of a process that lived less than one tick (NVML lists running
processes only), and an overshoot smaller than the tolerance, indefinitely.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

DEFAULT_WINDOW_S = 5.0
DEFAULT_TOLERANCE_POINTS = 10.0


@dataclass
class ComputeWatch:
    """Per (claim, GPU): utilisation samples over the window; decides when to stop."""

    window_s: float = DEFAULT_WINDOW_S
    tolerance_points: float = DEFAULT_TOLERANCE_POINTS
    # (claim uid, GPU uuid) -> (time of the first sample kept, deque of (time, percent))
    _history: dict[tuple[str, str], tuple[float, deque]] = field(default_factory=dict)

    def observe(
        self, now: float, key: tuple[str, str], by_pid: dict[int, float], share: float
    ) -> tuple[int, float] | None:
        """Record the claim's utilisation now (`by_pid`: its processes' SM utilisation in
        percent); returns (pid to stop, the window's mean) once the mean over a full window
        exceeds `share + tolerance_points`, else None."""
        since, samples = self._history.get(key, (now, deque()))
        samples.append((now, float(sum(by_pid.values()))))
        while samples and samples[0][0] < now - self.window_s:
            samples.popleft()
        self._history[key] = (since, samples)
        if now - since < self.window_s or not by_pid:
            return None
        mean = sum(p for _, p in samples) / len(samples)
        if mean <= share + self.tolerance_points:
            return None
        del self._history[key]  # the next stop needs a window of its own
        return max(by_pid, key=by_pid.get), mean

    def forget(self, live: set[tuple[str, str]]) -> None:
        """Drop the history of claims no longer on the node."""
        for key in [k for k in self._history if k not in live]:
            del self._history[key]
