"""The ways past the slice found by the issue #13 attack runs (items 3, 4, 5 and 8), each through
an entry point reached directly, via dlsym and via cuGetProcAddress, on both builds. simgpu
models what a real driver does in each case (context footprint, pool growth, per-device pools,
context address reuse, host-located and still-mapped VMM memory), so only the core keeps the
process inside its slice."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nodeagent import region
from tests.native.conftest import CONTEXT_MIB, Container, GpuBox, MiB

SLICE = 64 * MiB
CTX = CONTEXT_MIB * MiB
HOWS = ["direct", "dlsym", "getproc"]
OOM = 2
NOT_SUPPORTED = 801


def _run(box: GpuBox, c: Container | dict[str, str], case: str, how: str) -> dict[str, str]:
    proc = box.run(c, "holes", case, how)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "RESULT" in proc.stdout, proc.stdout + proc.stderr
    fields: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        fields.update(re.findall(r"(\w+)=(\S+)", line))
    return fields


def _codes(fields: dict[str, str]) -> list[int]:
    return [int(x) for x in fields["codes"].split(",")]


def _without_nvml(box: GpuBox, c: Container, tmp: Path) -> dict[str, str]:
    """The container's environment with a loader path that has libcuda.so.1 and no NVML."""
    only_cuda = tmp / "no-nvml"
    only_cuda.mkdir(exist_ok=True)
    link = only_cuda / "libcuda.so.1"
    if not link.exists():
        link.symlink_to(box.build.root / "simgpu" / "libcuda.so.1")
    return {**c.env, "LD_LIBRARY_PATH": str(only_cuda)}


# ---- Item 3: a context never costs less than the floor the agent measured.


@pytest.mark.parametrize("how", HOWS)
def test_contexts_are_charged_the_floor_without_nvml(
    any_box: GpuBox, tmp_path: Path, how: str
) -> None:
    c = any_box.container("c", [(0, SLICE, 100)])
    fields = _run(any_box, _without_nvml(any_box, c, tmp_path), "ctxmany", how)
    assert fields["phys0"] == "-1"  # NVML really was not loadable
    fitting = (SLICE - CTX) // CTX
    assert _codes(fields) == [0] * fitting + [OOM] * (20 - fitting)
    assert int(fields["charged_all"]) == SLICE
    assert int(fields["least_charge"]) == CTX
    assert int(fields["free"]) == SLICE - CTX  # destroyed: every charge came back
    assert region.read_region(c.region_dir).devices[0].memory_peak == SLICE


@pytest.mark.parametrize("how", HOWS)
def test_contexts_racing_a_freeing_thread_are_charged_at_least_the_floor(
    any_box: GpuBox, how: str
) -> None:
    big = 1024 * MiB
    c = any_box.container("c", [(0, big, 100)])
    fields = _run(any_box, c, "ctxrace", how)
    assert _codes(fields) == [0] * 20
    # The primary context and 20 more, each at least the floor, whatever was freed meanwhile.
    assert int(fields["charged_all"]) >= 21 * CTX
    assert int(fields["least_charge"]) >= CTX  # not one context charged less than the floor
    assert int(fields["free"]) == big - CTX


# ---- Item 4: a refused stream-ordered allocation leaves no pool grown.


@pytest.mark.parametrize("how", HOWS)
def test_refused_async_allocations_do_not_strand_pool_memory(any_box: GpuBox, how: str) -> None:
    c = any_box.container("c", [(0, SLICE, 100)])
    fields = _run(any_box, c, "poolstrand", how)
    assert _codes(fields) == [OOM, OOM, 0]
    # The default pool keeps the 16 MiB it served (threshold at max), charged; nothing else.
    assert int(fields["reserved_default"]) == 16 * MiB
    assert int(fields["reserved_made"]) == 0
    assert int(fields["phys0"]) == CTX + 16 * MiB
    assert int(fields["free"]) == SLICE - CTX - 16 * MiB


# ---- Item 5: pools and streams of another device charge that device, or are refused.


@pytest.mark.parametrize("how", HOWS)
def test_pool_on_a_device_outside_the_slice_is_refused(any_box: GpuBox, how: str) -> None:
    c = any_box.container("c", [(0, SLICE, 100)])
    fields = _run(any_box, c, "pooldev1", how)
    assert _codes(fields) == [OOM] * 6
    assert int(fields["phys1"]) == 0
    assert int(fields["free"]) == SLICE - CTX


@pytest.mark.parametrize("how", HOWS)
def test_pool_on_device_1_charges_device_1(any_box: GpuBox, how: str) -> None:
    c = any_box.container("c", [(0, SLICE, 100), (1, SLICE, 100)])
    fields = _run(any_box, c, "pooldev1", how)
    assert _codes(fields) == [0] * 4 + [OOM] * 2
    assert int(fields["phys1"]) == SLICE
    devices = region.read_region(c.region_dir).devices
    assert devices[1].memory_peak == SLICE
    assert devices[0].memory_peak == CTX


@pytest.mark.parametrize("how", HOWS)
def test_async_allocation_on_a_device_1_stream_charges_device_1(any_box: GpuBox, how: str) -> None:
    c = any_box.container("c", [(0, SLICE, 100), (1, SLICE, 100)])
    fields = _run(any_box, c, "asyncdev1", how)
    assert _codes(fields) == [0] * 3 + [OOM] * 3
    assert int(fields["phys1"]) == CTX + 48 * MiB
    devices = region.read_region(c.region_dir).devices
    assert devices[1].memory_peak == CTX + 48 * MiB
    assert devices[0].memory_peak == CTX
    outside = any_box.container("d", [(0, SLICE, 100)])
    fields = _run(any_box, outside, "asyncdev1", how)
    assert fields["ctx1"] == "101"  # no context on a device outside the slice (issue #27)
    assert "codes" not in fields  # no allocation was tried
    assert int(fields["phys1"]) == 0


@pytest.mark.parametrize("how", HOWS)
def test_a_context_at_a_reused_address_is_looked_up_again(any_box: GpuBox, how: str) -> None:
    # Device 1 in the slice with room for its context only: the 32 MiB there is refused.
    c = any_box.container("c", [(0, SLICE, 100), (1, CTX, 100)])
    fields = _run(any_box, c, "ctxreuse", how)
    assert fields["reused"] == "1"  # simgpu handed out the destroyed context's address
    assert _codes(fields) == [OOM]
    assert int(fields["phys1"]) == CTX  # device 1 holds its context, nothing allocated


# ---- Item 8: VMM handles located in host memory, unknown locations, release while mapped.


@pytest.mark.parametrize("how", HOWS)
def test_host_located_vmm_takes_no_device_memory_and_unknown_locations_are_refused(
    any_box: GpuBox, how: str
) -> None:
    c = any_box.container("c", [(0, SLICE, 100)])
    fields = _run(any_box, c, "vmmhost", how)
    assert _codes(fields) == [0] * 20 + [NOT_SUPPORTED]
    assert int(fields["host_phys0"]) == CTX  # 5 GiB of host memory, none of it on the card
    assert int(fields["phys0"]) == CTX
    assert region.read_region(c.region_dir).devices[0].memory_peak == CTX


@pytest.mark.parametrize("how", HOWS)
def test_a_released_handle_stays_charged_while_mapped(any_box: GpuBox, how: str) -> None:
    c = any_box.container("c", [(0, SLICE, 100)])
    fields = _run(any_box, c, "vmmmapped", how)
    assert _codes(fields) == [OOM, 0]
    assert int(fields["mapped_phys0"]) == CTX + 32 * MiB
    assert int(fields["phys0"]) == CTX
    assert int(fields["free"]) == SLICE - CTX
    assert region.read_region(c.region_dir).devices[0].memory_peak <= SLICE


@pytest.mark.parametrize("how", HOWS)
def test_a_retained_handle_keeps_its_charge_after_release_and_unmap(
    any_box: GpuBox, how: str
) -> None:
    """At 7382faa retain, release and unmap dropped the charge while the retained handle
    held the 32 MiB: the next 48 MiB fit, 84 MiB on the card for a 64 MiB slice."""
    c = any_box.container("c", [(0, SLICE, 100)])
    fields = _run(any_box, c, "vmmretain", how)
    assert _codes(fields) == [OOM, 0]
    assert int(fields["retained_phys0"]) == CTX + 32 * MiB
    assert region.read_region(c.region_dir).devices[0].memory_peak <= SLICE


# ---- Graph memory committed by an upload, not only by a launch.


@pytest.mark.parametrize("how", HOWS)
def test_graph_upload_and_upload_at_instantiation_are_charged(any_box: GpuBox, how: str) -> None:
    c = any_box.container("c", [(0, SLICE, 100)])
    fields = _run(any_box, c, "graphupload", how)
    # 4 + 24 + 24 MiB fit in 64; a third 24 MiB graph would not.
    assert _codes(fields) == [0, 0, OOM]
    assert int(fields["phys_after0"]) == CTX + 24 * MiB
    assert int(fields["phys_after1"]) == CTX + 48 * MiB
    assert int(fields["phys_after2"]) == CTX + 48 * MiB
    assert int(fields["free"]) == SLICE - CTX - 48 * MiB
    assert region.read_region(c.region_dir).devices[0].memory_peak == CTX + 48 * MiB


# ---- Issue #27, item 2: the graph the core reads is the graph the driver instantiates.


def test_nodes_added_by_the_programs_own_free_during_instantiation_are_charged(
    box: GpuBox,
) -> None:
    """At 7382faa the core called free() between reading the graph and instantiating it: a
    program's own free() added 10 x 48 MiB nodes there and the card held 488 MiB on a 64 MiB
    slice. Now nothing the program can interpose runs in that window. Normal build only: a
    program replacing free() cannot run under ASan, whose allocator owns the heap."""
    c = box.container("c", [(0, SLICE, 100)])
    p = box.start(c, "graphfree", "10", "48")
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line.startswith("launch="), line + (p.stderr.read() if p.stderr else "")
        assert p.stdout.readline().startswith("held")
        assert box.physical_used(0) <= SLICE, line
    finally:
        p.communicate(timeout=30)
