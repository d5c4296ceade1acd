"""The rest of the driver surface that can hold device memory (issue #27, item 7), each entry
point reached directly, via dlsym and via cuGetProcAddress, on both builds. simgpu models what
a real driver does (context limits reserve device memory, an imported VMM handle keeps its
memory after the original is released, an updated exec allocates what its new graph does), so
only the core keeps the process inside its slice. Ground truth: NVML's per-process bytes from
simgpu (the core is not asked). Every figure "at 7382faa" was measured by the same case with
that commit's core (NATIVE_CORE_UNDER_TEST)."""

from __future__ import annotations

import re

import pytest

from tests.native.conftest import CONTEXT_MIB, GpuBox, MiB

SLICE = 64 * MiB
CTX = CONTEXT_MIB * MiB
HOWS = ["direct", "dlsym", "getproc"]
OOM = 2
NOT_SUPPORTED = 801


def _run(box: GpuBox, case: str, how: str) -> tuple[list[int], int, str]:
    c = box.container("c", [(0, SLICE, 100)])
    proc = box.run(c, "surface", case, how)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = re.search(r"RESULT codes=(\S+) phys=(-?\d+)", proc.stdout)
    assert m, proc.stdout + proc.stderr
    return [int(x) for x in m.group(1).split(",")], int(m.group(2)), proc.stderr


@pytest.mark.parametrize("how", HOWS)
def test_context_limits_are_charged_and_given_back(any_box: GpuBox, how: str) -> None:
    """At 7382faa a 40 MiB heap raise and a 40 MiB stack raise were never charged: each next
    32 MiB allocation fit, 76 MiB on the card for a 64 MiB slice."""
    codes, phys, _ = _run(any_box, "limit", how)
    # heap +40 MiB, 32 MiB refused; stack +40 MiB, 32 MiB refused; lowered: 48 MiB fits; a
    # created context's raised heap goes with the context: 48 MiB fits again.
    assert codes == [0, OOM, 0, OOM, 0, 0, 0]
    assert phys <= SLICE
    assert phys == CTX + 48 * MiB


@pytest.mark.parametrize("how", HOWS)
def test_a_device_runtime_limit_raise_is_refused_with_its_own_reason(
    any_box: GpuBox, how: str
) -> None:
    """At 083f417 the refusal printed the text of shared memory ("device memory shared with
    another process"), which says nothing of why a launch-depth raise was refused."""
    codes, _, err = _run(any_box, "devrtlimit", how)
    assert codes == [NOT_SUPPORTED, 0]  # raised: refused; set to what it is: passes
    assert "raising this cuCtxSetLimit limit refused (CUDA_ERROR_NOT_SUPPORTED)" in err
    assert "cannot be charged to this slice. Lowering it is allowed." in err
    assert "shared with another process" not in err


@pytest.mark.parametrize("how", HOWS)
def test_exported_device_memory_cannot_outlive_its_charge(any_box: GpuBox, how: str) -> None:
    """At 7382faa a VMM handle exported and imported again kept its 32 MiB after the original
    was released and unmapped (its charge given back): 84 MiB on the card for 64 MiB."""
    codes, phys, err = _run(any_box, "vmmshare", how)
    assert codes == [NOT_SUPPORTED, NOT_SUPPORTED, 0]
    assert phys == CTX + 48 * MiB
    assert "cuMemExportToShareableHandle refused (CUDA_ERROR_NOT_SUPPORTED)" in err
    assert "Share it between threads of one process, or through host memory." in err
    assert err.count("cuMemImportFromShareableHandle refused") == 1


@pytest.mark.parametrize("how", HOWS)
def test_host_memory_is_exported_but_never_imported(any_box: GpuBox, how: str) -> None:
    codes, phys, _ = _run(any_box, "hostshare", how)
    assert codes == [0, NOT_SUPPORTED, 0]  # system memory leaves; nothing comes in
    assert phys == CTX + 48 * MiB


@pytest.mark.parametrize("case", ["ipc", "pool"])
@pytest.mark.parametrize("how", HOWS)
def test_ipc_and_pool_sharing_are_refused(any_box: GpuBox, case: str, how: str) -> None:
    """At 7382faa both passed through (0): memory another process could hold past its free."""
    codes, phys, err = _run(any_box, case, how)
    assert codes == [NOT_SUPPORTED] * len(codes)
    assert phys <= SLICE
    assert "refused (CUDA_ERROR_NOT_SUPPORTED)" in err


@pytest.mark.parametrize("how", HOWS)
def test_an_exec_update_that_grows_its_allocations_is_charged(any_box: GpuBox, how: str) -> None:
    """At 7382faa an exec instantiated from a 4 MiB graph and updated from a 40 MiB one was
    launched uncharged beyond its first 4 MiB: 84 MiB on the card for 64 MiB."""
    codes, phys, _ = _run(any_box, "execupdate", how)
    # launch 4 MiB; update; launch refused beside 40 MiB held; after the free it fits.
    assert codes == [0, 0, OOM, 0]
    assert phys <= SLICE


@pytest.mark.parametrize("how", HOWS)
def test_child_graphs_hold_no_memory_nodes_but_their_later_nodes_are_charged(
    any_box: GpuBox, how: str
) -> None:
    """The driver embeds and clones only graphs without memory nodes (simgpu as documented);
    an allocation node added to an embedded child's own graph afterwards is read by the
    core's walk at instantiation like any other."""
    codes, phys, _ = _run(any_box, "childgraph", how)
    # embed a 4 MiB graph: refused (1); clone it: refused (801); launch with 40 MiB held: OOM;
    # freed: it fits.
    assert codes == [1, NOT_SUPPORTED, OOM, 0]
    assert phys <= SLICE
