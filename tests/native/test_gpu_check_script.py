"""bench/gpu_check.sh run for real on simgpu, so its one run on a real GPU cannot fail for
plumbing: simgpu's nvidia-smi and libcuda.so.1 come first on the paths, the core is the one the
script builds, and PyTorch is either absent (the repo's .venv) or a SIMULATED stand-in
(tests/native/fake_torch) that drives simgpu through cuGetProcAddress as the runtime does."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

from tests.native.conftest import ROOT, GpuBox

SCRIPT = ROOT / "bench" / "gpu_check.sh"
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
FAKE_TORCH = ROOT / "tests" / "native" / "fake_torch"
NUMBER = r"\d+(\.\d+)?"


def _run(box: GpuBox, tmp: Path, path_first: Path | None = None, **env: str) -> tuple[int, str]:
    """Runs the script on box's simulated GPU; returns (exit status, results file)."""
    full = box.base_env()
    full.pop("PYTHONPATH", None)
    simgpu = box.build.root / "simgpu"
    dirs = [str(p) for p in (path_first, simgpu) if p]
    full.update(PATH=os.pathsep.join([*dirs, os.environ["PATH"]]), PYTHON=str(VENV_PYTHON))
    full.update(env)
    results = tmp / "results" / "gpu_check.txt"
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(results)],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    figures = results.read_text() if results.exists() else ""
    assert figures, proc.stdout + proc.stderr
    return proc.returncode, figures + "\n--- stderr ---\n" + proc.stderr[-3000:]


def _figure(figures: str, key: str) -> str:
    m = re.search(rf"^{re.escape(key)}: (.*)$", figures, re.MULTILINE)
    assert m, f"no {key!r} in:\n{figures}"
    return m.group(1)


def _assert_proc_address_matched(figures: str) -> None:
    matched, total = _figure(figures, "proc_address_identity").split("/")
    assert matched == total, figures
    assert int(total) > 20
    assert _figure(figures, "proc_address.cuMemAlloc").startswith("ok default=cuMemAlloc_v2")
    assert _figure(figures, "check.proc_address_identity") == "ok"


def test_without_torch_it_checks_the_slice_and_says_why_it_stops(
    box: GpuBox, tmp_path: Path
) -> None:
    rc, figures = _run(box, tmp_path)
    assert rc == 3, figures
    assert _figure(figures, "gpu") == "Tesla V100-PCIE-32GB, 32768 MiB, 550.00-simgpu (SIMULATED)"
    assert _figure(figures, "check.build") == "ok"
    _assert_proc_address_matched(figures)
    assert _figure(figures, "nvidia_smi_total_mib") == "8192"
    assert _figure(figures, "check.nvidia_smi_shows_slice") == "ok"
    assert re.search(r"^error: PyTorch .* not installed", figures, re.MULTILINE), figures
    assert "torch_mem_get_info_total" not in figures


def test_a_wrong_slice_in_nvidia_smi_fails_its_check(box: GpuBox, tmp_path: Path) -> None:
    """An nvidia-smi that escapes the core shows the whole card: the check must say so."""
    escape = tmp_path / "escape"
    escape.mkdir()
    smi = escape / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nunset LD_PRELOAD\nexec {box.build.root}/simgpu/nvidia-smi "$@"\n')
    smi.chmod(0o755)
    rc, figures = _run(box, tmp_path, path_first=escape)
    assert rc == 3, figures
    assert _figure(figures, "nvidia_smi_total_mib") == "32768"
    assert _figure(figures, "check.nvidia_smi_shows_slice") == "FAILED"


def test_with_simulated_torch_every_check_writes_its_figure(box: GpuBox, tmp_path: Path) -> None:
    rc, figures = _run(box, tmp_path, PYTHONPATH=str(FAKE_TORCH), GPU_CHECK_MATMUL_S="1")
    assert _figure(figures, "torch").endswith("available True")
    _assert_proc_address_matched(figures)
    assert _figure(figures, "torch_mem_get_info_total") == str(8 << 30)
    for alloc in ("default", "backend:cudaMallocAsync", "expandable_segments:True"):
        filled = int(_figure(figures, f"filled_bytes.{alloc}"))
        assert 7 << 30 <= filled <= 8 << 30, figures
        assert _figure(figures, f"fill_stopped_by.{alloc}") == "OutOfMemoryError"
    assert _figure(figures, "two_processes") == "first=held second=oom"
    for key in ("mem_get_info_shows_slice", "cap.default", "shared_cap", "nvidia_smi_shows_slice"):
        assert _figure(figures, f"check.{key}") == "ok", figures
    # Throughput on simgpu is simulated: its figures must be there, not within 3 points.
    assert re.fullmatch(NUMBER, _figure(figures, "tflops.no_core")), figures
    for pct in (100, 50, 25):
        assert re.fullmatch(NUMBER, _figure(figures, f"tflops_percent_of_no_core.share_{pct}"))
        assert _figure(figures, f"check.share_{pct}") in {"ok", "FAILED"}
    assert re.fullmatch(r"-?" + NUMBER, _figure(figures, "overhead_percent_at_100"))
    assert rc == (1 if ": FAILED" in figures else 0), figures
    assert _figure(figures, "finished")


def test_hung_steps_end_at_the_deadline_with_every_figure_written(
    box: GpuBox, tmp_path: Path
) -> None:
    hang = tmp_path / "python"
    hang.write_text(
        "#!/bin/sh\n# every torch_probe.py step hangs; anything else runs\n"
        'case "$*" in *torch_probe.py*) exec sleep 600;; esac\n'
        f'exec {VENV_PYTHON} "$@"\n'
    )
    hang.chmod(0o755)
    start = time.monotonic()
    rc, figures = _run(
        box, tmp_path, PYTHON=str(hang), PYTHONPATH=str(FAKE_TORCH), GPU_CHECK_BUDGET_S="12"
    )
    assert time.monotonic() - start < 25, figures
    assert rc == 1, figures
    for key in ("torch_mem_get_info_total", "filled_bytes.default", "tflops.share_50"):
        assert _figure(figures, key) == "none"
    for key in ("mem_get_info_shows_slice", "cap.default", "shared_cap", "share_25"):
        assert _figure(figures, f"check.{key}") == "FAILED"
    assert _figure(figures, "two_processes") == "first=none second=none"
    assert _figure(figures, "finished")
