"""Fixtures of the node agent's unit tests (the GPU factories are tests/helpers/gpus.py)."""

from __future__ import annotations

import pytest

from nodeagent.discovery import GpuInfo
from tests.helpers.gpus import NODE, allocated_claim, v100

__all__ = ["NODE", "allocated_claim", "gpus", "v100"]


@pytest.fixture
def gpus() -> list[GpuInfo]:
    return [v100(i) for i in range(4)]
