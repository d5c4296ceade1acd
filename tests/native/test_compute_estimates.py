"""The compute share holds against programs that keep per-function estimates stale (#44).

Each case runs alone on its own simulated GPU at a 25 % share for 10 s under the shipped core,
injected as the CDI edits inject it (tests/native/progs/estimates.c): a new function every 32
launches whose cheap first launch set the estimate (item 2), a new thread every 16 launches or
one per launch so that an asynchronous sample died with its thread (item 3), and fresh idle
streams with 500 ms queued ahead and a new function every 200 launches (item 4). At 083f417
they got 96-100 % of the device; the core now charges what launches took on the device,
measured by samples that no function, stream or thread can avoid or outlive. The share is the
device time of the program's kernels (simgpu runs each for what it asked) over its wall time.
"""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path

import pytest

from nodeagent import region
from tests.native.conftest import Build, GiB, GpuBox

SECONDS = 10.0
TRICKS = ["rotate", "threads16", "thread1", "fresh"]


@pytest.fixture(scope="module")
def shares(tmp_path_factory: pytest.TempPathFactory, native_build: Build) -> dict[str, float]:
    procs = {}
    for mode in TRICKS:
        box = GpuBox(tmp_path_factory.mktemp(mode), native_build)
        c = box.container("c", [(0, 1 * GiB, 25)])
        procs[mode] = box.start_mounted(c, "estimates", mode, str(SECONDS))
    out: dict[str, float] = {}
    for mode, p in procs.items():
        stdout, stderr = p.communicate(timeout=SECONDS + 120)
        assert p.returncode == 0, stdout + stderr
        out[mode] = float(stdout.split()[1])
    return out


@pytest.mark.parametrize("trick", TRICKS)
def test_a_stale_estimate_still_pays_the_device_time(shares: dict[str, float], trick: str) -> None:
    assert shares[trick] <= 28.0, shares


def test_the_busy_counter_never_goes_down(tmp_path: Path, native_build: Build) -> None:
    """compute_used_ns is the slice's kernel-busy time, which the agent exports as a Prometheus
    counter: a sample that settles below what its launches were charged (here every one, once a
    function measured at 1 ms runs 1 us kernels) is taken off later additions, never off the
    counter."""
    box = GpuBox(tmp_path, native_build)
    c = box.container("c", [(0, 1 * GiB, 50)])
    p = box.start(c, "estimates", "cheaper", "3")
    seen: list[int] = []
    while p.poll() is None:
        with contextlib.suppress(region.RegionError):  # not created yet
            seen.append(region.read_region(c.region_dir).devices[0].compute_used_ns)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 0, stdout + stderr
    assert len(seen) > 100, len(seen)
    drops = [(a, b) for a, b in itertools.pairwise(seen) if b < a]
    assert not drops, drops[:5]
