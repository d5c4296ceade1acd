"""The shipped core takes its limits and region only from the fixed in-container paths.

A process inside the container chooses its own environment before exec, so any variable
naming a limit, a config file or a region folder would let the tenant choose the slice
(issue #13, item 1: `TRANCHE_SLICE_CONFIG=/nonexistent TRANCHE_MEMORY_LIMIT=8589934592` held
8176 MiB on a 64 MiB slice). These run the shipped `libtranche.so` in a private mount
namespace with the claim's config and region where the CDI mounts put them.
"""

from __future__ import annotations

import re
import subprocess

from tests.native.conftest import Build, GpuBox, MiB

SLICE = 64 * MiB


def _filled(proc: subprocess.CompletedProcess[str]) -> int:
    m = re.search(r"OK alloc filled=(\d+) total=(\d+)", proc.stdout)
    assert m, proc.stdout + proc.stderr
    assert int(m.group(2)) == SLICE, proc.stdout
    return int(m.group(1))


def _dynamic_imports(lib: str) -> set[str]:
    out = subprocess.run(
        ["nm", "-D", "--undefined-only", lib], capture_output=True, text=True, check=True
    ).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def _strings(lib: str) -> str:
    return subprocess.run(["strings", "-a", lib], capture_output=True, text=True, check=True).stdout


def test_shipped_core_reads_nothing_from_the_environment(any_build: Build) -> None:
    shipped, test_only = str(any_build.lib), str(any_build.test_lib)
    assert not {"getenv", "secure_getenv", "__libc_getenv"} & _dynamic_imports(shipped)
    assert "environ" not in _dynamic_imports(shipped)
    assert "TRANCHE_" not in _strings(shipped)
    # The check can tell: the test variant does read its two paths from the environment.
    assert "getenv" in _dynamic_imports(test_only)
    assert "TRANCHE_SLICE_CONFIG" in _strings(test_only)


def test_tenant_environment_cannot_choose_the_limit(any_box: GpuBox) -> None:
    c = any_box.container("c", [(0, SLICE, 100)])
    honest = _filled(any_box.run_mounted(c, "captest", "alloc"))
    assert SLICE - 8 * MiB <= honest < SLICE
    # What the attack run did: no config where it says, a limit of its own choosing.
    c.env.update(TRANCHE_SLICE_CONFIG="/nonexistent", TRANCHE_MEMORY_LIMIT=str(8 << 30))
    assert _filled(any_box.run_mounted(c, "captest", "alloc")) == honest
    # A private config file of its own naming a 16 GiB slice.
    private = any_box.container("private", [(0, 16 << 30, 100)])
    c.env["TRANCHE_SLICE_CONFIG"] = str(private.config_path)
    assert _filled(any_box.run_mounted(c, "captest", "alloc")) == honest


def test_tenant_environment_cannot_choose_a_fresh_region(any_box: GpuBox) -> None:
    c = any_box.container("c", [(0, SLICE, 100)])
    holder = any_box.start_mounted(c, "probe", "hold", str(40 * MiB))
    try:
        line = holder.stdout.readline()
        assert line.startswith("held"), line + holder.stderr.read()
        own = any_box.tmp / "own-region"
        own.mkdir()
        c.env["TRANCHE_REGION_DIR"] = str(own)
        # The second process shares the container's counter: at most what the first left.
        assert _filled(any_box.run_mounted(c, "captest", "alloc")) <= SLICE - 40 * MiB
        assert not any(own.iterdir())
    finally:
        holder.communicate(timeout=30)


def test_no_config_at_the_fixed_path_means_no_gpu(any_box: GpuBox) -> None:
    c = any_box.container("c", [(0, SLICE, 100)])
    c.env["TRANCHE_MEMORY_LIMIT"] = str(8 << 30)
    proc = any_box.run_mounted(c, "probe", "info", config_setup=":")
    assert "tranche: GPU access refused" in proc.stderr, proc.stdout + proc.stderr
    assert "no slice config at /etc/tranche/slice.conf" in proc.stderr
    assert proc.returncode != 0


def test_a_dangling_link_is_an_invalid_config_not_a_missing_one(any_box: GpuBox) -> None:
    c = any_box.container("c", [(0, SLICE, 100)])
    proc = any_box.run_mounted(
        c, "probe", "info", config_setup="ln -s /nonexistent/slice.conf slice.conf"
    )
    assert "tranche: GPU access refused" in proc.stderr, proc.stdout + proc.stderr
    assert "cannot read slice config /etc/tranche/slice.conf" in proc.stderr
    assert "no slice config" not in proc.stderr
