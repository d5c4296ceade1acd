"""The slice config format: what the agent writes is what the core accepts, strictly."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from nodeagent import sliceconfig as sc
from tests.native.conftest import CONTEXT_MIB, ROOT, Build, GpuBox

GOOD = sc.SliceConfig(
    claim="team-a/claim-7",
    devices=(
        sc.DeviceSlice("GPU-51a1a7ed-0000-4000-8000-000000000000", 8 << 30, 50),
        sc.DeviceSlice("GPU-51a1a7ed-0000-4000-8000-000000000001", 4 << 30, 25),
    ),
)


def test_round_trip_and_read_only_atomic_write(tmp_path: Path) -> None:
    path = tmp_path / "etc" / "slice.conf"
    sc.write(path, GOOD)
    sc.write(path, GOOD)  # idempotent rewrite over a read-only file
    assert sc.read(path) == GOOD
    assert not path.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    assert [p.name for p in path.parent.iterdir()] == ["slice.conf"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("claim = x\ndevice.0.uuid = GPU-1\n", "needs version"),
        ("version = 2\nclaim = x\n", "version must appear once and be 1"),
        ("version = 1\nclaim = x\nfoo = 1\n", "unknown key 'foo'"),
        ("version = 1\nclaim = x\ndevice.0.uuid = GPU-1\n", "needs uuid, memory_bytes"),
        ("version = 1\nclaim = x\ndevice.0.memory_bytes = -5\n", "must be an integer"),
        ("version = 1\nclaim = x\ndevice.1.uuid = GPU-1\n", "device.0 needs"),
        ("version = 1\nclaim = x\nnonsense\n", "expected key = value"),
    ],
)
def test_invalid_files_are_refused_with_the_line(text: str, message: str) -> None:
    with pytest.raises(sc.SliceConfigError, match=message):
        sc.parse(text, source="t")


def test_invalid_values_are_refused_at_construction() -> None:
    with pytest.raises(sc.SliceConfigError, match="compute_percent"):
        sc.DeviceSlice("GPU-1", 1, 0)
    with pytest.raises(sc.SliceConfigError, match="memory_bytes"):
        sc.DeviceSlice("GPU-1", 0, 10)
    with pytest.raises(sc.SliceConfigError, match="uuid"):
        sc.DeviceSlice("gpu-1", 1, 10)
    with pytest.raises(sc.SliceConfigError, match="only once"):
        sc.SliceConfig("x", (sc.DeviceSlice("GPU-1", 1, 1), sc.DeviceSlice("GPU-1", 1, 1)))


CASES = json.loads((Path(__file__).parent / "sliceconfig_cases.json").read_text())["cases"]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "slice.conf"
    path.write_bytes(text.encode("utf-8"))
    return path


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_python_parser_follows_the_shared_grammar(tmp_path: Path, case: dict) -> None:
    path = _write(tmp_path, case["text"])
    if case["valid"]:
        sc.read(path)
    else:
        with pytest.raises(sc.SliceConfigError):
            sc.read(path)


def test_c_parser_follows_the_shared_grammar(tmp_path: Path, any_build: Build) -> None:
    """The core's reader (src/config.c, built alone as configcheck) on the same cases: one
    grammar on both sides, and the C side reads exactly the values the Python side does."""
    wrong = []
    for i, case in enumerate(CASES):
        (tmp_path / str(i)).mkdir()
        path = _write(tmp_path / str(i), case["text"])
        proc = subprocess.run(
            [str(any_build.prog("configcheck")), str(path)],
            capture_output=True,
            text=True,
            env={
                **os.environ,
                **any_build.extra_env,
                "LD_PRELOAD": " ".join(any_build.preload_prefix),
            },
            check=False,
        )
        accepted = proc.returncode == 0 and proc.stdout.startswith("ok ")
        if proc.returncode not in (0, 1):
            wrong.append(f"{case['name']}: configcheck crashed: {proc.stdout}{proc.stderr}")
        elif accepted != case["valid"]:
            wrong.append(f"{case['name']}: C {'accepts' if accepted else 'refuses'}: {proc.stdout}")
        elif accepted:
            py = sc.read(path)
            want = [f"ok claim={py.claim} devices={len(py.devices)}"] + [
                f"device {j} {d.uuid} {d.memory_bytes} {d.compute_percent} {d.context_floor_bytes}"
                for j, d in enumerate(py.devices)
            ]
            if proc.stdout.splitlines() != want:
                wrong.append(f"{case['name']}: C read {proc.stdout!r}, Python {want!r}")
    assert not wrong, "\n".join(wrong)


def test_context_floor_is_required_and_positive_on_both_sides(box: GpuBox) -> None:
    """The floor that keeps context charges from failing open: the agent always writes it, and
    the Python and C parsers refuse a file without it (or with 0) with the same words. The
    shared grammar cases (sliceconfig_cases.json) cover the rest."""
    c = box.container("c", [(0, 64 << 20, 100)])
    text = c.config_path.read_text()
    assert "device.0.context_floor_bytes = 4194304" in text
    bad = c.config_path.parent / "bad.conf"
    c.env["TRANCHE_SLICE_CONFIG"] = str(bad)
    for broken, message in [
        ("\n".join(ln for ln in text.splitlines() if "context_floor" not in ln), "needs uuid"),
        (
            text.replace("context_floor_bytes = 4194304", "context_floor_bytes = 0"),
            "context_floor_bytes must be an integer 1..2^64-1",
        ),
    ]:
        bad.write_text(broken + "\n")
        with pytest.raises(sc.SliceConfigError, match=re.escape(message)):
            sc.parse(broken)
        proc = box.run(c, "probe", "info")
        assert proc.returncode != 0
        assert message in proc.stderr or message in proc.stdout, proc.stdout + proc.stderr
    with pytest.raises(sc.SliceConfigError, match="context_floor_bytes"):
        sc.DeviceSlice("GPU-1", 1, 1, 0)


def test_discovery_measures_a_context_like_the_core(box: GpuBox) -> None:
    """nodeagent.discovery.measure_context_bytes on simgpu: the simulated context footprint."""
    script = (
        "from nodeagent import discovery; from tests.native.conftest import sim_uuid; "
        "print(discovery.measure_context_bytes(sim_uuid(1)))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=box.base_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) == CONTEXT_MIB << 20
