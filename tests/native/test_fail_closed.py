"""Failure modes: a missing, unreadable or invalid config or region means no GPU at all."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

from nodeagent import region
from tests.native.conftest import GpuBox, MiB

CUDA_ERROR_NO_DEVICE = 100


def _refused(proc: subprocess.CompletedProcess[str], why: str) -> None:
    assert proc.returncode != 0
    assert f"= {CUDA_ERROR_NO_DEVICE} " in proc.stdout  # cuInit refused
    assert "tranche: GPU access refused" in proc.stderr
    assert why in proc.stderr


def test_missing_config_fails_closed(box: GpuBox) -> None:
    c = box.container("c", [(0, 64 * MiB, 100)])
    c.env["TRANCHE_SLICE_CONFIG"] = str(c.config_path.parent / "absent.conf")
    _refused(box.run(c, "probe", "info"), "refusing to run the GPU unlimited")
    # NVML is refused as well, so nvidia-smi and pynvml show no GPU either.
    script = "import pynvml\ntry:\n    pynvml.nvmlInit()\nexcept pynvml.NVMLError as e:\n"
    script += "    print(type(e).__name__)\n"
    out = subprocess.run(
        [sys.executable, "-c", script], env=c.env, capture_output=True, text=True, check=False
    )
    assert out.stdout.strip() == "NVMLError_NoPermission", out.stderr
    smi = subprocess.run(
        [str(box.build.root / "simgpu" / "nvidia-smi")],
        env=c.env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert smi.returncode != 0


def test_unreadable_or_invalid_config_fails_closed_without_env_fallback(box: GpuBox) -> None:
    c = box.container("c", [(0, 64 * MiB, 100)])
    c.env["TRANCHE_MEMORY_LIMIT"] = str(1 << 40)  # never used while a config path exists
    unreadable = c.config_path.parent / "dir.conf"
    unreadable.mkdir()
    c.env["TRANCHE_SLICE_CONFIG"] = str(unreadable)
    _refused(box.run(c, "probe", "info"), "dir.conf: Is a directory")
    bad = c.config_path.parent / "bad.conf"
    bad.write_text("version = 1\nclaim = x\ndevice.0.uuid = GPU-1\n")
    c.env["TRANCHE_SLICE_CONFIG"] = str(bad)
    _refused(box.run(c, "probe", "info"), "needs uuid, memory_bytes and compute_percent")
    text = c.config_path.read_text().replace("compute_percent = 100", "compute_percent = 150")
    bad.write_text(text)
    _refused(box.run(c, "probe", "info"), "compute_percent must be 1..100")


def test_environment_limits_are_never_applied(box: GpuBox) -> None:
    """There is no environment fallback any more (issue #13, item 1): no config, no GPU."""
    c = box.container("c", [(0, 64 * MiB, 100)])
    c.env["TRANCHE_SLICE_CONFIG"] = str(c.config_path.parent / "absent.conf")
    c.env["TRANCHE_MEMORY_LIMIT"] = str(32 * MiB)
    _refused(box.run(c, "captest", "alloc"), "no slice config at")


def test_corrupt_region_is_refused(box: GpuBox) -> None:
    c = box.container("c", [(0, 64 * MiB, 100)])
    (c.region_dir / region.REGION_FILE).write_bytes(b"\x00garbage" * 2000)
    _refused(box.run(c, "probe", "info"), "region is corrupt")


def test_foreign_version_region_is_refused(box: GpuBox) -> None:
    c = box.container("c", [(0, 64 * MiB, 100)])
    assert box.run(c, "probe", "info").returncode == 0  # creates the region
    path = c.region_dir / region.REGION_FILE
    data = bytearray(path.read_bytes())
    struct.pack_into("<H", data, 4, region.MAJOR + 1)
    path.write_bytes(bytes(data))
    _refused(box.run(c, "probe", "info"), f"layout version {region.MAJOR + 1}.0")
    assert f"not {region.MAJOR}.x" in str(_reader_error(c.region_dir))


def _reader_error(region_dir: os.PathLike[str]) -> Exception:
    try:
        region.read_region(region_dir)
    except region.RegionError as exc:
        return exc
    raise AssertionError("the reader accepted a foreign region")
