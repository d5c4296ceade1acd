"""The compute half of the NVML backstop: each claim's share of a GPU, as NVML's per-process
utilisation shows it, against the share that was sold.

The interception core meters compute inside each process; a process that launches work the
core never sees (the driver's entry points read from libcuda's symbol table, a static binary,
raw ioctls) is metered by nothing. Every tick the collector (`nodeagent/status.py`) sums NVML's
per-process SM utilisation (`nvmlDeviceGetProcessUtilization`) over the processes it attributes
to each claim, as it does for memory, and hands the sum to `ComputeWatch.observe`. A claim whose
mean over the last `window_s` seconds is above its share by more than `tolerance_points` is
over its share for the whole window: the collector then throttles the claim's pods
(`nodeagent/throttle.py`: the cgroup freezer, duty-cycled to the share) for `hold_s(key)`, not
one process: a process stopped is restarted by its tenant, while the pod's cgroup holds every
process it starts. Each further verdict on the same claim doubles the hold (up to `MAX_HOLD_S`).

The window is short (two agent ticks by default) because the action is mild: a claim held to
its share loses nothing it paid for. Honest programs held to their share by the core (within 3
points of it) never come near the tolerance; a burst (the core's 10 ms budget) moves a window's
mean by a fraction of a point.

`Duty` steers the freezer's thawed fraction from what NVML shows while the claim is held: work
queued before a freeze still runs on the device, so a duty equal to the share can leave more.

What this cannot see: work of a process that lived less than one tick (NVML lists running
processes only), and an overshoot smaller than the tolerance, indefinitely.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

DEFAULT_WINDOW_S = 2.0
DEFAULT_TOLERANCE_POINTS = 10.0
FIRST_HOLD_S = 60.0
MAX_HOLD_S = 960.0
MIN_DUTY = 0.02  # thawed at least 2 ms in 100: the pod's own CPU work is never stopped outright


@dataclass
class ComputeWatch:
    """Per (claim, GPU): utilisation samples over the window; decides when to throttle."""

    window_s: float = DEFAULT_WINDOW_S
    tolerance_points: float = DEFAULT_TOLERANCE_POINTS
    # (claim uid, GPU uuid) -> (time of the first sample kept, deque of (time, percent))
    _history: dict[tuple[str, str], tuple[float, deque]] = field(default_factory=dict)
    # (claim uid, GPU uuid) -> verdicts so far: each doubles the next hold
    _strikes: dict[tuple[str, str], int] = field(default_factory=dict)

    def observe(
        self, now: float, key: tuple[str, str], by_pid: dict[int, float], share: float
    ) -> float | None:
        """Record the claim's utilisation now (`by_pid`: its processes' SM utilisation in
        percent); returns the window's mean once the mean over a full window exceeds
        `share + tolerance_points`, else None. A verdict starts the claim's history afresh."""
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
        del self._history[key]  # judged again only after a window of its own
        self._strikes[key] = self._strikes.get(key, 0) + 1
        return mean

    def hold_s(self, key: tuple[str, str]) -> float:
        """How long the claim's latest verdict holds it: FIRST_HOLD_S, doubled per repeat."""
        strikes = max(1, self._strikes.get(key, 1))
        return min(MAX_HOLD_S, FIRST_HOLD_S * 2 ** (strikes - 1))

    def restart(self, key: tuple[str, str]) -> None:
        """Judge the claim from now on only (its hold ended: what it did while held is not
        held against it)."""
        self._history.pop(key, None)

    def forget(self, live: set[tuple[str, str]]) -> None:
        """Drop the history of claims no longer on the node."""
        for store in (self._history, self._strikes):
            for key in [k for k in store if k not in live]:
                del store[key]


def next_duty(duty: float, used: float, share: float) -> float:
    """The freezer's thawed fraction for the next tick of a held claim, from the `used`
    percent NVML showed at `duty`: half the error corrected per tick (queued work and NVML's
    sampling make one tick's figure noisy), within [MIN_DUTY, 1]."""
    return min(1.0, max(MIN_DUTY, duty + 0.5 * (share - used) / 100.0))
