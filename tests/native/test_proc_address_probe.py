"""tests/gpu/proc_address_probe.py on simgpu: it must pass where the core's assumption holds
(cuGetProcAddress returns the driver's exported symbols) and name what breaks it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.native.conftest import NATIVE, ROOT, GpuBox

PROBE = ROOT / "tests" / "gpu" / "proc_address_probe.py"
HOOKS_DEF = NATIVE / "src" / "hooks.def"


def _probe(box: GpuBox, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(PROBE), *args],
        env=box.base_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _figure(out: str, key: str) -> str:
    m = re.search(rf"^{re.escape(key)}: (.*)$", out, re.MULTILINE)
    assert m, f"no {key} line in:\n{out}"
    return m.group(1)


def test_every_hooked_base_name_resolves_to_a_listed_variant(box: GpuBox) -> None:
    proc = _probe(box)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    hooks = re.findall(r"^HOOK\((\w+), \w+, (\w+)\)", HOOKS_DEF.read_text(), re.MULTILINE)
    bases = {base for family, base in hooks if family != "NVML"}
    assert _figure(proc.stdout, "proc_address_identity") == f"{len(bases)}/{len(bases)}"
    assert _figure(proc.stdout, "proc_address_mismatches") == "none"
    assert _figure(proc.stdout, "proc_address_absent") == "none"
    # Which variant the driver picked, per flag: the newest ABI, the _ptsz one per thread.
    assert _figure(proc.stdout, "proc_address.cuMemAlloc").startswith(
        "ok default=cuMemAlloc_v2 ptds=cuMemAlloc_v2 "
    )
    assert "ptds=cuLaunchKernel_ptsz" in _figure(proc.stdout, "proc_address.cuLaunchKernel")
    assert "cuGetProcAddress_v2 cudaVersion=12090" in _figure(proc.stdout, "proc_address_query")


def test_an_unlisted_variant_fails_and_is_named(box: GpuBox, tmp_path: Path) -> None:
    """A hooks.def lacking the variant the driver returns: what the core would refuse."""
    hooks = tmp_path / "hooks.def"
    text = HOOKS_DEF.read_text()
    assert "HOOK(MEM, cuMemAlloc_v2, cuMemAlloc)\n" in text
    hooks.write_text(
        text.replace("HOOK(MEM, cuMemAlloc_v2, cuMemAlloc)\n", "")
        + "HOOK(MEM, cuNoSuchEntryPoint, cuNoSuchEntryPoint)\n"
    )
    proc = _probe(box, "--hooks", str(hooks))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    matched, total = map(int, _figure(proc.stdout, "proc_address_identity").split("/"))
    assert matched == total - 1
    assert _figure(proc.stdout, "proc_address_mismatches") == "cuMemAlloc"
    assert "default=UNLISTED cuMemAlloc_v2" in _figure(proc.stdout, "proc_address.cuMemAlloc")
    # A name the driver lacks is reported, not counted as a failure.
    assert _figure(proc.stdout, "proc_address_absent") == "cuNoSuchEntryPoint"


def test_no_driver_is_an_error_not_a_pass(box: GpuBox) -> None:
    env = {k: v for k, v in box.base_env().items() if k != "LD_LIBRARY_PATH"}
    proc = subprocess.run(
        [sys.executable, str(PROBE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode == 0:
        pytest.skip("a real libcuda.so.1 is on the loader path here")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert _figure(proc.stdout, "proc_address_identity").startswith("error")
