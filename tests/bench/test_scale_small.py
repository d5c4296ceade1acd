"""The fleet benchmark at its smallest size completes and writes its figures (never a timing:
speed goals are the benchmark's own figures, read in bench/results/scale.json)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIGURES = (
    "bulk_buy",
    "allocation",
    "agent",
    "portal",
    "order_to_active",
    "noop_resync",
    "node_lost",
    "watcher",
)


@pytest.mark.timeout(1200)
def test_scale_small_completes_and_writes_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "scale.py"), "--size", "small", "--output", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=1100, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert [s["nodes"] for s in figures["steps"]] == [2, 4]
    for step in figures["steps"]:
        missing = [name for name in FIGURES if name not in step]
        assert not missing, f"step of {step['nodes']} nodes lacks {missing}"
    assert "everything the bench started is stopped" in run.stdout
    leftovers = subprocess.run(
        ["pgrep", "-f", "tranche-scale-"], capture_output=True, text=True, check=False
    ).stdout.split()
    assert not leftovers, f"processes of the bench still running: {leftovers}"
