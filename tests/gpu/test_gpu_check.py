"""The real-GPU check: bench/gpu_check.sh must pass on a machine with an NVIDIA GPU."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_script_passes(tmp_path: Path) -> None:
    results = tmp_path / "gpu_check.txt"
    proc = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_check.sh"), str(results)],
        capture_output=True,
        text=True,
        timeout=480,
        check=False,
    )
    figures = results.read_text() if results.exists() else ""
    assert proc.returncode == 0, figures + proc.stderr[-3000:]
    assert "check.cap.default: ok" in figures
