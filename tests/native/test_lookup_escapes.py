"""Ways around the interposed dlsym to the real driver are closed (issue #13, item 2).

At b6aafaa each of these handed out the driver's own cuMemAlloc_v2 and a 1 GiB allocation
went through on a 512 MiB slice: glibc's dlsym fetched with dlvsym (or from libc's handle), a
shim opened with RTLD_DEEPBIND, a shim loaded with dlmopen into a new link-map namespace,
and cuGetProcAddress asked for a suffixed name. What cannot be closed in the core (a static
binary, the driver's ioctls) meets the NVML backstop:
tests/integration/agents/test_backstop_escapes.py.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from nodeagent import region
from tests.native.conftest import NATIVE, Build, GpuBox, MiB

CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NOT_FOUND = 500
WAYS = [
    "dlvsym-2.34",
    "dlvsym-2.2.5",
    "libc-dlsym",
    "dlvsym-driver",
    "getproc-suffixed",
    "deepbind-direct",
    "deepbind-dlsym",
]


def _hooks() -> list[tuple[str, str]]:
    text = (NATIVE / "src" / "hooks.def").read_text()
    return re.findall(r"^HOOK\(\w+, (\w+), (\w+)\)", text, re.MULTILINE)


@pytest.mark.parametrize("way", WAYS)
def test_every_way_to_the_driver_meets_the_cap(any_box: GpuBox, way: str) -> None:
    if way.startswith("deepbind") and any_box.build.name == "sanitized":
        pytest.skip("ASan's own dlopen interceptor refuses RTLD_DEEPBIND before the core")
    c = any_box.container("c", [(0, 512 * MiB, 100)])
    shim = str(any_box.build.prog("libdeepshim.so"))
    proc = any_box.run(c, "lookups", "alloc", way, shim)
    assert f"way={way} in_core=1 alloc={CUDA_ERROR_OUT_OF_MEMORY}" in proc.stdout, (
        proc.stdout + proc.stderr
    )


def test_suffixed_names_from_cu_get_proc_address_are_the_hooks(any_box: GpuBox) -> None:
    suffixed = sorted({name for name, base in _hooks() if name != base and name[:2] == "cu"})
    assert len(suffixed) >= 14  # cuMemAlloc_v2 and the 13 others the attack run named
    c = any_box.container("c", [(0, 512 * MiB, 100)])
    proc = any_box.run(c, "lookups", "suffixed", *suffixed, "cuMemAlloc_v3")
    lines = dict(re.findall(r"^name=(\w+) (.*)$", proc.stdout, re.MULTILINE))
    assert set(lines) == {*suffixed, "cuMemAlloc_v3"}, proc.stdout + proc.stderr
    for name in suffixed:
        assert lines[name] == "v1=0 v1_in_core=1 v2=0 v2_in_core=1", name
    # A variant of a hooked entry point that no hook covers stays refused, suffixed or not.
    assert lines["cuMemAlloc_v3"] == (
        f"v1={CUDA_ERROR_NOT_FOUND} v1_in_core=0 v2={CUDA_ERROR_NOT_FOUND} v2_in_core=0"
    )


def test_a_library_in_a_new_link_map_namespace_meets_the_core(any_box: GpuBox) -> None:
    """dlmopen(LM_ID_NEWLM) gives a library its own copy of the driver; the core loads itself
    into that namespace first, so the copy is hooked and accounts in the same region."""
    if any_box.build.name == "sanitized":
        pytest.skip("an ASan-instrumented core cannot load into a second namespace (ASan must "
                    "come first in every one); the shipped core is not instrumented")  # fmt: skip
    c = any_box.container("c", [(0, 512 * MiB, 100)])
    shim = str(any_box.build.prog("libdeepshim.so"))
    over = any_box.run(c, "lookups", "escape", "dlmopen", str(1 << 30), shim)
    assert f"FAIL escape dlmopen = {CUDA_ERROR_OUT_OF_MEMORY}" in over.stdout, (
        over.stdout + over.stderr
    )
    holder = any_box.start(c, "lookups", "escape", "dlmopen", str(256 * MiB), shim)
    try:
        line = holder.stdout.readline()
        assert line.startswith("held"), line + holder.stderr.read()
        snap = region.read_region(c.region_dir)
        assert snap.devices[0].memory_used >= 256 * MiB  # charged by the namespace's core
        assert len([s for s in snap.live_slots if s.pid == holder.pid]) == 2
    finally:
        holder.communicate(timeout=30)


def test_the_interposers_are_exported(any_build: Build) -> None:
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(any_build.lib)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    exported = {line.split()[-1] for line in out.splitlines()}
    assert {"dlsym", "dlvsym", "dlopen", "dlmopen"} <= exported


def test_the_interposers_reach_glibc_by_a_tail_call(any_build: Build) -> None:
    """glibc resolves RTLD_NEXT and $ORIGIN against its caller's return address: each
    interposer must leave with an indirect jump into glibc, never a call."""
    out = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", str(any_build.root / "obj" / "lookup.o")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for name in ("dlsym", "dlvsym", "dlopen", "dlmopen"):
        body = re.search(rf"<{name}>:\n(.*?)\n\n", out, re.DOTALL)
        assert body, name
        assert re.search(r"\bjmp\s+\*", body.group(1)), f"{name} calls glibc instead of jumping"
