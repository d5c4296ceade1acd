"""bench/gpu_check.sh --driver-api run for real on simgpu (GPU_CHECK_DRIVER=simgpu), so its run
on a lent H100/H200 cannot fail for plumbing: the script builds the native tree itself, runs
the native programs under the shipped libtranche.so with each slice at the fixed in-container
paths, and must report every check ok; with no core preloaded the slice checks must fail, so
an ok means the core held the slice, not that the check could not see."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

from tests.native.conftest import ROOT, Build

SCRIPT = ROOT / "bench" / "gpu_check.sh"
PATHS = ["alloc", "managed", "pitch", "async", "pool", "vmm", "array", "array3d", "mipmap"]
HOLES = [
    "pool.strand",
    "pool.create_async",
    "vmm.mapped_release",
    "vmm.retained",
    "graph.alloc_node",
    "graph.captured_alloc",
    "graph.launched",
    "graph.upload",
    "graph.exec_update",
    "graph.child",
    "contexts.v3",
    "contexts.v4",
    "contexts.green",
    "legacy.v1_alloc",
    "ctx_set_limit",
]
EVERY_CHECK = {
    "build",
    "no_config_no_gpu",
    *(f"{what}.{g}g" for g in (8, 4) for what in ("mem_get_info_shows_slice",)),
    *(f"nvml_nvidia_smi_shows_slice.{g}g" for g in (8, 4)),
    *(f"cap.{p}.{g}g" for g in (8, 4) for p in PATHS),
    *HOLES,
    "graph.nodes_added_by_free",
    "contexts.other_device",
    "thread_churn.contexts",
    "thread_churn.launches",
    "zombie_leader_chain",
    "two_processes_share_the_cap",
    "launch_share.25",
    "launch_share.50",
    "launch_share.100",
    "share_25_75",
    "overhead_measured",
    "fma_at_100_within_3_percent",
}


def _run(tmp: Path, **env: str) -> tuple[int, str, float]:
    """Runs the driver-API check on simgpu; returns (exit status, results file, seconds)."""
    full = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRANCHE_", "SIMGPU_", "LD_PRELOAD", "GPU_CHECK_"))
    }
    full.update(GPU_CHECK_DRIVER="simgpu", **env)
    results = tmp / "results" / "gpu_check_driver.txt"
    start = time.monotonic()
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--driver-api", str(results)],
        env=full,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    seconds = time.monotonic() - start
    figures = results.read_text() if results.exists() else ""
    assert figures, proc.stdout + proc.stderr
    return proc.returncode, figures + "\n--- stderr ---\n" + proc.stderr[-3000:], seconds


def _checks(figures: str) -> dict[str, str]:
    return dict(re.findall(r"^check\.(\S+): (ok|FAILED)$", figures, re.MULTILINE))


def _figure(figures: str, key: str) -> str:
    m = re.search(rf"^{re.escape(key)}: (.*)$", figures, re.MULTILINE)
    assert m, f"no {key!r} in:\n{figures}"
    return m.group(1)


def test_every_driver_api_check_passes_on_simgpu(native_build: Build, tmp_path: Path) -> None:
    rc, figures, seconds = _run(tmp_path)
    checks = _checks(figures)
    assert set(checks) == EVERY_CHECK, figures
    failed = [name for name, result in checks.items() if result != "ok"]
    assert not failed, figures
    assert rc == 0, figures
    assert seconds < 120, figures
    # The figures the device run is read for are there, and say what the slice is.
    assert _figure(figures, "driver") == "simgpu"
    assert _figure(figures, "nvidia_smi_total_mib.8g") == "8192"
    assert _figure(figures, "context_bytes") == str(4 << 20)
    assert re.fullmatch(r"25=\S+ 75=\S+ over 4s", _figure(figures, "share_percent.pair"))
    assert re.match(
        r"no_core=[\d.]+ core=[\d.]+ added=-?[\d.]+$",
        _figure(figures, "overhead_ns.cuLaunchKernel"),
    )
    assert re.match(r"[\d.]+ \(best round", _figure(figures, "fma_percent_of_no_core"))
    assert int(_figure(figures, "wall_s")) > 0


def test_without_the_core_the_slice_checks_fail(native_build: Build, tmp_path: Path) -> None:
    """Nothing preloaded: the same programs take more than their slice, see the whole card and
    get the whole GPU, and the checks say so (the script is not built to pass)."""
    rc, figures, _ = _run(
        tmp_path,
        GPU_CHECK_CORE="none",
        GPU_CHECK_PREBUILT="1",
        GPU_CHECK_BUILD=str(native_build.root),
        GPU_CHECK_RUN_S="1",
        GPU_CHECK_WINDOW_S="1",
        GPU_CHECK_SLICES_GIB="4",
    )
    assert rc == 1, figures
    checks = _checks(figures)
    for name in (
        "no_config_no_gpu",
        "mem_get_info_shows_slice.4g",
        "nvml_nvidia_smi_shows_slice.4g",
        "cap.alloc.4g",
        "cap.vmm.4g",
        "graph.launched",
        "contexts.v4",
        "two_processes_share_the_cap",
        "launch_share.25",
        "share_25_75",
        "thread_churn.contexts",
        "thread_churn.launches",
    ):
        assert checks[name] == "FAILED", (name, figures)
    assert _figure(figures, "nvidia_smi_total_mib.4g") == "81559"
