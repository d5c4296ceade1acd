"""Arguments that would make the core spin or wrap are answered at once (issue #13, item 9).

At b6aafaa `numMipmapLevels = 2^32-1` spun 9.4 s of CPU inside the core (a loop per level,
shifting by more than the width of size_t), and array sizes were multiplied without overflow
checks, so an extent of 2^64 bytes was charged 0.
"""

from __future__ import annotations

import re

import pytest

from tests.native.conftest import GpuBox, MiB

CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2
NO_SPIN_MS = 1000  # what the call may cost in CPU: a bound against spinning, not a speed goal


def _call(box: GpuBox, what: str, how: str) -> tuple[int, float]:
    c = box.container("c", [(0, 512 * MiB, 100)])
    proc = box.run(c, "hugeloops", what, how, timeout=30)
    m = re.search(r"code=(-?\d+) cpu_ms=([\d.]+)", proc.stdout)
    assert m, proc.stdout + proc.stderr
    return int(m.group(1)), float(m.group(2))


@pytest.mark.parametrize("how", ["direct", "dlsym", "getproc"])
def test_mipmap_level_count_beyond_the_extent_is_refused_at_once(any_box: GpuBox, how: str) -> None:
    code, cpu_ms = _call(any_box, "mipmap", how)
    assert code == CUDA_ERROR_INVALID_VALUE  # what the driver answers for too many levels
    assert cpu_ms < NO_SPIN_MS


@pytest.mark.parametrize("how", ["direct", "dlsym", "getproc"])
def test_an_array_past_64_bits_is_over_the_cap_not_free(any_box: GpuBox, how: str) -> None:
    code, cpu_ms = _call(any_box, "wrap", how)
    assert code == CUDA_ERROR_OUT_OF_MEMORY
    assert cpu_ms < NO_SPIN_MS
