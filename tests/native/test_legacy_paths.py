"""Cap holes outside the _v2 allocation calls: legacy v1 entry points, cuCtxCreate_v3/_v4, green
contexts, graph memory nodes and async allocations on a capturing stream (charged when the graph
is launched, issue #13: no longer refused outright), and launches on an
explicit stream with no context current (outside the compute budget). Each is reached directly,
via dlopen+dlsym and via cuGetProcAddress with the cudaVersion that selects that variant.
simgpu implements them like a real driver (they really take simulated device memory or device
time; `test_simgpu_alone_lets_them_through` shows it), so only the core keeps them inside the
slice."""

from __future__ import annotations

import re

import pytest

from nodeagent import region
from tests.native.conftest import CONTEXT_MIB, GpuBox, MiB

SLICE = 64 * MiB
CTX = CONTEXT_MIB * MiB
HOWS = ["direct", "dlsym", "getproc"]
NOT_SUPPORTED = 801
OOM = 2

# Refused outright (fail closed): v1 allocators (+ one v1 free), v1 cuCtxCreate.
REFUSED = {
    "alloc": [NOT_SUPPORTED] * 5,
    "pitch": [NOT_SUPPORTED] * 5,
    "array": [NOT_SUPPORTED] * 4,
    "array3d": [NOT_SUPPORTED] * 4,
    "ctx1": [NOT_SUPPORTED] * 20,
}
# Graph memory (captured cuMemAllocAsync, cuGraphAddMemAllocNode, cuGraphAddNode): adding takes
# nothing; each launch backs 40 MiB from the graph pool and is charged then. The first graph
# fits beside the context, the next ones would pass the slice: refused at launch.
GRAPH_CODES = [0, 0] + [0, OOM] * 3
GRAPH_MEM = 40 * MiB
# Charged like cuCtxCreate_v2: contexts fit until the slice is full, then out of memory.
FITTING = (SLICE - CTX) // CTX
CHARGED = {p: [0] * FITTING + [OOM] * (20 - FITTING) for p in ("ctx3", "ctx4", "green")}
INVALID_CONTEXT = 201


def _fields(out: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in out.splitlines():
        fields.update(re.findall(r"(\w+)=(\S+)", line))
    return fields


def _escape(box: GpuBox, path: str, how: str) -> dict[str, str]:
    c = box.container("c", [(0, SLICE, 100)])
    proc = box.run(c, "escape", path, how)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "RESULT" in proc.stdout, proc.stdout + proc.stderr
    fields = _fields(proc.stdout)
    # Never more on the device than the slice, by the driver's own per-process count ...
    assert int(fields["phys"]) <= SLICE
    assert int(fields.get("phys_peak", "0")) <= SLICE
    # ... nor in the container's accounting.
    assert region.read_region(c.region_dir).devices[0].memory_peak <= SLICE
    return fields


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("path", sorted(REFUSED))
def test_legacy_and_graph_allocators_are_refused(any_box: GpuBox, path: str, how: str) -> None:
    fields = _escape(any_box, path, how)
    assert [int(x) for x in fields["codes"].split(",")] == REFUSED[path]
    # Nothing but the primary context ever reached the device.
    assert int(fields["phys"]) == CTX
    assert int(fields.get("phys_peak", str(CTX))) == CTX
    assert int(fields["free"]) == SLICE - CTX


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("path", ["capture", "graph", "graphnode"])
def test_graph_memory_is_charged_at_launch_and_refused_over_the_slice(
    any_box: GpuBox, path: str, how: str
) -> None:
    """Issue #13: graph memory is sold, not refused; what would pass the slice is refused with
    CUDA_ERROR_OUT_OF_MEMORY at launch, and the region agrees with NVML throughout."""
    c = any_box.container("c", [(0, SLICE, 100)])
    proc = any_box.run(c, "escape", path, how)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fields = _fields(proc.stdout)
    assert [int(x) for x in fields["codes"].split(",")] == GRAPH_CODES
    assert int(fields["phys_peak"]) == CTX + GRAPH_MEM  # the first graph ran, charged
    snap = region.read_region(c.region_dir).devices[0]
    assert snap.memory_peak == CTX + GRAPH_MEM
    # Graphs destroyed: the pool keeps the memory, and the core keeps charging it.
    assert int(fields["kept_phys"]) == CTX + GRAPH_MEM
    assert int(fields["kept_free"]) == SLICE - CTX - GRAPH_MEM
    # Trimmed: both back to the context alone.
    assert int(fields["phys"]) == CTX
    assert int(fields["free"]) == SLICE - CTX
    assert region.read_region(c.region_dir).devices[0].memory_used == CTX


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("path", sorted(CHARGED))
def test_new_context_variants_are_charged_and_released(
    any_box: GpuBox, path: str, how: str
) -> None:
    fields = _escape(any_box, path, how)
    assert [int(x) for x in fields["codes"].split(",")] == CHARGED[path]
    assert int(fields["phys_peak"]) == SLICE  # filled exactly, never over
    # Destroyed (cuCtxDestroy, the legacy v1 one, or cuGreenCtxDestroy): every charge came back.
    assert int(fields["phys"]) == CTX
    assert int(fields["free"]) == SLICE - CTX


@pytest.mark.parametrize("how", HOWS)
def test_legacy_info_calls_report_the_slice(box: GpuBox, how: str) -> None:
    fields = _escape(box, "info", how)
    assert fields["codes"] == "0,0"
    assert int(fields["total1"]) == SLICE
    assert int(fields["device_total1"]) == SLICE
    assert int(fields["free1"]) == SLICE - CTX


def test_get_proc_address_hands_out_the_hook_of_the_selected_variant(any_box: GpuBox) -> None:
    fields = _escape(any_box, "lookup", "-")
    assert fields["codes"] == "0"


@pytest.mark.parametrize("how", HOWS)
def test_launch_without_a_current_context_is_refused(any_box: GpuBox, how: str) -> None:
    """A driver launching a CUkernel on an explicit stream uses the stream's context; with no
    context current the core could not tell which budget to charge, so it refuses."""
    c = any_box.container("c", [(0, SLICE, 25)])
    proc = any_box.run(c, "escape", "nocontext", how)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _fields(proc.stdout)["codes"] == ",".join([str(INVALID_CONTEXT)] * 4)
    assert region.read_region(c.region_dir).devices[0].launches == 0


@pytest.mark.parametrize("how", HOWS)
def test_pool_allocation_without_a_current_context_is_refused(any_box: GpuBox, how: str) -> None:
    """A pool and an explicit stream name a device without any context current: the driver
    would serve it, the core could not tell whose slice pays."""
    fields = _escape(any_box, "nocontextpool", how)
    assert fields["codes"] == ",".join([str(INVALID_CONTEXT)] * 4)
    assert int(fields["phys_peak"]) == CTX


@pytest.mark.parametrize("path", ["green", "capture", "graph", "nocontext", "nocontextpool"])
def test_simgpu_alone_lets_them_through(box: GpuBox, path: str) -> None:
    """Without the core the same program gets past the slice: the refusals above are the
    core's, not the simulator's."""
    proc = box.run(box.base_env(), "escape", path, "getproc")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fields = _fields(proc.stdout)
    assert set(fields["codes"].split(",")) == {"0"}
    if path != "nocontext":
        assert int(fields["phys_peak"]) > SLICE
