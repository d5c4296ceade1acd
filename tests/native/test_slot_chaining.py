"""A claim's charge cannot be duplicated by a process that makes its slot look dead (issue #27,
item 1).

At 7382faa a slot's only sign of life was its OFD lock, which the owner itself can drop
(F_OFD_SETLK F_UNLCK on its descriptor, or mapping the region again and closing every
descriptor), and a child made by a raw clone() (no atfork handler) charged to its parent's
slot and shared its lock: the next process reclaimed the "dead" slot and was given the whole
slice again. Four holders in a chain held 4 x the slice on that core (recorded in
nodeagent/native/README.md). Now a slot is reclaimed only once its process is gone, and a
cloned child takes a slot of its own before it is charged anything.

The card's own counter (simgpu through NVML, no core) is the ground truth; no backstop runs.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from nodeagent import region
from tests.native.conftest import GpuBox, MiB

SLICE = 64 * MiB
CHUNK = 4 * MiB
HOLDERS = 4


def _held(proc: subprocess.Popen[str]) -> int:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("held"), line + (proc.stderr.read() if proc.stderr else "")
    return int(line.split()[1])


@pytest.mark.parametrize("pace_s", [0.0, 0.3])
@pytest.mark.parametrize("trick", ["unlock", "remap", "clone"])
def test_a_chain_of_holders_dropping_their_slots_never_exceeds_the_slice(
    any_box: GpuBox, trick: str, pace_s: float
) -> None:
    c = any_box.container("c", [(0, SLICE, 100)])
    holders: list[subprocess.Popen[str]] = []
    try:
        held = []
        for _ in range(HOLDERS):
            p = any_box.start(c, "chain", trick, str(CHUNK))
            holders.append(p)
            held.append(_held(p))
            time.sleep(pace_s)  # the pace of the chain, not a wait for a result
        physical = any_box.physical_used()
        assert held[0] > 0  # the first holder really filled its slice
        assert physical <= SLICE + CHUNK, (trick, held, physical)
        assert sum(held) <= SLICE
        # The books still show the live holders: the agent reclaims nothing of theirs (only a
        # dead parent's context in the clone case).
        region.reclaim_dead(c.region_dir)
        assert region.read_region(c.region_dir).devices[0].memory_used >= sum(held)
    finally:
        for p in holders:
            p.communicate(timeout=30)  # closing stdin ends the holder (and a cloned child)


def test_a_holders_slot_is_reclaimed_once_it_is_gone(any_box: GpuBox) -> None:
    """Liveness by process, not lock: a holder that dropped its lock is reclaimed after it
    exits, so the next process gets the slice back."""
    c = any_box.container("c", [(0, SLICE, 100)])
    first = any_box.start(c, "chain", "unlock", str(CHUNK))
    assert _held(first) > 0
    first.communicate(timeout=30)
    second = any_box.start(c, "chain", "unlock", str(CHUNK))
    try:
        assert _held(second) > SLICE // 2
    finally:
        second.communicate(timeout=30)
