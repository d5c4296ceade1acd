"""The shared region's layout, pinned on both sides: the C header and nodeagent/region.py."""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path

from nodeagent import region
from tests.native.conftest import NATIVE, GpuBox, MiB


def _c_layout(tmp_path: Path) -> dict[str, int]:
    exe = tmp_path / "layout_probe"
    subprocess.run(
        ["gcc", "-std=c11", "-Wall", "-Werror", f"-I{NATIVE / 'src'}", "-o", str(exe),
         str(Path(__file__).with_name("layout_probe.c"))],
        check=True,
    )  # fmt: skip
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in (line.split() for line in out.splitlines())}


def test_python_reader_matches_the_c_layout(tmp_path: Path) -> None:
    c = _c_layout(tmp_path)
    assert c["sizeof.region"] == region.REGION_SIZE == 11872
    assert c["sizeof.device"] == region.DEVICE_SIZE == 128
    assert c["sizeof.slot"] == region.SLOT_SIZE == 152
    assert c["tr_region_t.devices"] == region.DEVICES_OFFSET
    assert c["tr_region_t.slots"] == region.SLOTS_OFFSET
    assert c["tr_device_t.mem_used"] == region.MEM_USED_OFFSET
    assert c["tr_slot_t.mem_used"] == region.SLOT_MEM_OFFSET
    assert c["const.magic"] == region.MAGIC
    assert c["const.major"] == region.MAJOR
    assert c["const.max_devices"] == region.MAX_DEVICES
    assert c["const.max_slots"] == region.MAX_SLOTS
    assert c["const.lock_base"] == region.LOCK_BASE
    # The struct formats the reader unpacks with cover the records exactly, field by field.
    assert region.HEADER.size == c["tr_region_t.devices"]
    assert region.DEVICE.size == c["sizeof.device"]
    assert region.SLOT.size == c["sizeof.slot"]
    assert [c["tr_region_t.created_ns"], c["tr_region_t.claim"]] == [24, 32]
    slot_fields = ["pid", "generation", "start_time", "pid_ns", "mem_used"]
    assert [c[f"tr_slot_t.{f}"] for f in slot_fields] == [0, 4, 8, 16, 24]
    device_fields = ["uuid", "mem_limit", "mem_used", "mem_rejected", "mem_peak",
                     "compute_percent"]  # fmt: skip
    assert [c[f"tr_device_t.{f}"] for f in device_fields] == [0, 48, 56, 64, 72, 80]
    assert [c[f"tr_device_t.{f}"] for f in ["tokens_ns", "compute_used_ns", "launches"]] == [
        88,
        104,
        120,
    ]


def test_reader_sees_what_the_core_wrote(box: GpuBox) -> None:
    c = box.container("c", [(0, 64 * MiB, 40), (1, 32 * MiB, 60)])
    holder = box.start(c, "probe", "hold", str(8 * MiB))
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().startswith("held")
        snap = region.read_region(c.region_dir)
        assert snap.claim == "tests/c"
        assert (snap.major, snap.minor) == (2, 0)
        assert [d.memory_limit for d in snap.devices] == [64 * MiB, 32 * MiB]
        assert [d.compute_percent for d in snap.devices] == [40, 60]
        assert snap.devices[0].uuid.startswith("GPU-51a1a7ed")
        (slot,) = snap.live_slots
        assert slot.pid == holder.pid
        assert slot.start_time > 0
        assert slot.pid_ns == os.stat(f"/proc/{holder.pid}/ns/pid").st_ino
        assert slot.memory_used[0] == snap.devices[0].memory_used
        raw = (c.region_dir / region.REGION_FILE).read_bytes()
        assert struct.unpack_from("<I", raw, 0)[0] == region.MAGIC
    finally:
        holder.communicate(timeout=20)
