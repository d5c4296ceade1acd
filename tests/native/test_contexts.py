"""Contexts against the slice (issue #27, items 3, 4 and 6).

At 7382faa a context on a GPU the slice does not list was made uncharged by every create path
(primary, cuCtxCreate_v2/_v3/_v4, green), and a context was charged only after the driver had
made it, so creators racing against a full slice held contexts the books did not show until
each was refused (recorded in nodeagent/native/README.md). Now a device outside the slice
gets no context, and the floor is charged before the driver is asked.
"""

from __future__ import annotations

import subprocess
import time

from tests.native.conftest import CONTEXT_MIB, GpuBox, MiB

SLICE = 64 * MiB
CUDA_ERROR_INVALID_DEVICE = 101


def test_no_context_on_a_gpu_outside_the_slice(any_box: GpuBox) -> None:
    c = any_box.container("c", [(0, SLICE, 100)])
    p = any_box.start(c, "ctxtricks", "outside", "1")
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        codes = dict(kv.split("=") for kv in line.split())
        assert codes == dict.fromkeys(["retain", "v2", "v3", "v4", "green"], "101"), line
        assert p.stdout.readline().startswith("held")
        assert any_box.physical_used(1) == 0  # the driver was never asked
    finally:
        p.communicate(timeout=30)


def test_context_creators_against_a_full_slice_never_go_over_it(any_box: GpuBox) -> None:
    c = any_box.container("c", [(0, SLICE, 100)])
    holder = any_box.start(c, "chain", "hold", str(4 * MiB))
    creators: list[subprocess.Popen[str]] = []
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert int(line.split()[1]) == SLICE - CONTEXT_MIB * MiB, line  # the slice is full
        creators = [any_box.start(c, "ctxtricks", "churn", "2000") for _ in range(4)]
        peak = 0
        while any(p.poll() is None for p in creators):
            peak = max(peak, any_box.physical_used(0))
        outs = [p.communicate(timeout=30)[0] for p in creators]
        assert all(o.startswith("made=0 ") for o in outs), outs  # nothing fit: all refused
        assert peak <= SLICE, peak
    finally:
        for p in creators:
            if p.poll() is None:
                p.kill()
                p.communicate(timeout=30)
        holder.communicate(timeout=30)


def test_primary_retain_release_reset_races_stay_in_the_slice(any_box: GpuBox) -> None:
    """Two threads per process retaining, releasing and resetting the primary context while
    creating contexts, four processes, on a slice of three contexts: each context charged
    before it exists, so the card never holds more than the slice."""
    small = 3 * CONTEXT_MIB * MiB
    c = any_box.container("c", [(0, small, 100)])
    start = time.monotonic()
    procs = [any_box.start(c, "ctxtricks", "churn", "2000") for _ in range(4)]
    peak = 0
    while any(p.poll() is None for p in procs):
        peak = max(peak, any_box.physical_used(0))
    outs = [p.communicate(timeout=30)[0] for p in procs]
    assert time.monotonic() - start < 30
    assert all(int(o.split()[0].split("=")[1]) > 0 for o in outs), outs  # they did run
    assert peak <= small, peak
