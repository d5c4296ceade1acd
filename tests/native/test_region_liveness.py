"""A live process keeps its charge, and no process shares a slot (issue #13, items 6 and 7).

At b6aafaa a close() of another descriptor of region.bin dropped the process's POSIX lock,
so a peer reclaimed the live process's charge (a second process then held the full slice
again), and a process forked with all 64 slots taken shared slot 0, its memory wiped from
the books when slot 0's owner died.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal

from nodeagent import region
from tests.native.conftest import GpuBox, MiB

SLICE = 64 * MiB
CUDA_ERROR_NOT_INITIALIZED = 3


def test_closing_another_descriptor_of_the_region_keeps_the_charge(any_box: GpuBox) -> None:
    c = any_box.container("c", [(0, SLICE, 100)])
    path = str(region.region_path(c.region_dir))
    holder = any_box.start(c, "regiontricks", "closefd", path, str(40 * MiB))
    try:
        line = holder.stdout.readline()
        assert line.startswith("held"), line + holder.stderr.read()
        snap = region.read_region(c.region_dir)
        assert holder.pid in {s.pid for s in snap.live_slots}  # the agent still sees it alive
        proc = any_box.run(c, "captest", "alloc")
        m = re.search(r"filled=(\d+)", proc.stdout)
        assert m, proc.stdout + proc.stderr
        assert int(m.group(1)) <= SLICE - 40 * MiB  # the peer did not take the holder's bytes
        assert region.read_region(c.region_dir).devices[0].memory_used >= 40 * MiB
    finally:
        holder.communicate(timeout=30)


def test_a_process_forked_with_every_slot_taken_gets_no_gpu(any_box: GpuBox) -> None:
    c = any_box.container("c", [(0, SLICE, 100)])
    proc = any_box.run(c, "regiontricks", "fork64", timeout=120)
    assert f"child alloc={CUDA_ERROR_NOT_INITIALIZED}" in proc.stdout, proc.stdout + proc.stderr
    assert "GPU access refused in this forked process" in proc.stderr
    assert "all 64 process slots" in proc.stderr
    # Nothing was charged to a slot the child does not own.
    snap = region.read_region(c.region_dir)
    assert snap.devices[0].memory_used == sum(s.memory_used[0] for s in snap.slots)


def test_a_dead_parent_is_reclaimed_while_its_forked_child_lives(any_box: GpuBox) -> None:
    """The child holds a lock of its own: the parent's slot must not stay locked (and its
    bytes charged) because the child still shares the parent's descriptor."""
    c = any_box.container("c", [(0, SLICE, 100)])
    parent = any_box.start(c, "regiontricks", "forkhold", str(40 * MiB))
    try:
        line = parent.stdout.readline()
        assert line.startswith("held"), line + parent.stderr.read()
        child = int(line.split()[1])
        live = {s.pid for s in region.read_region(c.region_dir).live_slots}
        assert {parent.pid, child} <= live
        parent.kill()
        parent.wait(timeout=30)
        proc = any_box.run(c, "captest", "alloc")  # reclaims the dead parent's slot at start
        m = re.search(r"filled=(\d+)", proc.stdout)
        assert m, proc.stdout + proc.stderr
        assert int(m.group(1)) > SLICE - 40 * MiB  # the parent's 40 MiB came back
        assert child in {s.pid for s in region.read_region(c.region_dir).live_slots}
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.communicate(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
