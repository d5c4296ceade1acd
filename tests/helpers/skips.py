"""Skips shared by the tiers, each saying what to do to run the test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NATIVE_BUILD = REPO / "nodeagent" / "native" / "build"
CORE_LIBRARY = NATIVE_BUILD / "libtranche.so"  # what the launchers pass as --core-lib
SIMGPU_DIR = NATIVE_BUILD / "simgpu"

needs_native_sim = pytest.mark.skipif(
    not CORE_LIBRARY.exists() or shutil.which("unshare") is None,
    reason="needs `make -C nodeagent/native` (libtranche.so, simgpu) and unshare(1)",
)
