"""The sample image's programs stop at once on SIGTERM when they are a container's PID 1.

The kernel drops a signal sent to a PID namespace's init unless init handles it, so a program
without a handler makes `kubectl delete` of its pod wait the whole grace period (30 s) before
the kill (issue #49). Each program runs here as PID 1 of a fresh PID namespace (`unshare
--pid --fork`), as a container's entrypoint does, and gets SIGTERM from outside it, as the
kubelet sends it through the runtime.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from deploy.images import sample

from .conftest import Build, GpuBox

UNSHARE = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child"]


@pytest.fixture(scope="module")
def programs(native_build: Build, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tranche-sample and tranche-bypass, compiled as the image builds them."""
    out = tmp_path_factory.mktemp("sample-bin")
    sample._cc(["-o", str(out / "tranche-sample"), str(sample.SOURCE / "tranche-sample.c"),
                str(native_build.root / "simgpu" / "libcuda.so.1")])  # fmt: skip
    sample._cc(["-static", "-I", str(sample.SIMGPU), "-o", str(out / "tranche-bypass"),
                str(sample.SOURCE / "tranche-bypass.c"), str(sample.SIMGPU / "simstate.c"),
                "-lpthread"])  # fmt: skip
    return out


def _init_of(outer: subprocess.Popen) -> int:
    """The host PID of unshare's child: PID 1 inside the new namespace."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        children = Path(f"/proc/{outer.pid}/task/{outer.pid}/children").read_text().split()
        if children:
            pid = int(children[0])
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
            nspid = next(line.split()[1:] for line in status if line.startswith("NSpid:"))
            assert nspid[-1] == "1", nspid  # its own PID in the innermost namespace
            return pid
        time.sleep(0.01)
    raise AssertionError("unshare started no child")


def _start_as_init(
    argv: list[str], env: dict[str, str], ready: str
) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [*UNSHARE, *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seen: list[str] = []
    for line in proc.stdout:  # the program is in its steady state once it prints `ready`
        seen.append(line)
        if ready in line:
            return proc, _init_of(proc)
    proc.kill()
    raise AssertionError(f"never printed {ready!r}: {''.join(seen)}")


def _seconds_to_stop(proc: subprocess.Popen, init_pid: int) -> float:
    start = time.monotonic()
    os.kill(init_pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail("PID 1 ignored SIGTERM for 5 s: a pod delete would wait its grace period")
    return time.monotonic() - start


@pytest.mark.parametrize(
    ("argv", "ready"),
    [([], "computing with"), (["ram", "64"], "host memory 64 MiB")],
    ids=["check", "ram"],
)
def test_the_sample_as_pid_1_stops_at_once_on_sigterm(
    programs, native_build, tmp_path, argv, ready
):
    env = GpuBox(tmp_path, native_build).base_env()
    env["SAMPLE_ALLOC_MIB"] = "2048"
    proc, init_pid = _start_as_init([str(programs / "tranche-sample"), *argv], env, ready)
    took = _seconds_to_stop(proc, init_pid)
    rest = proc.stdout.read()
    print(f"tranche-sample {argv or 'check'}: gone {took * 1000:.0f} ms after SIGTERM")  # noqa: T201
    assert took < 2, took
    assert "SIGTERM, stopping" in rest, rest


def test_the_bypass_as_pid_1_stops_at_once_on_sigterm(programs, native_build, tmp_path):
    env = GpuBox(tmp_path, native_build).base_env()
    proc, init_pid = _start_as_init([str(programs / "tranche-bypass"), "512"], env, "holding")
    assert _seconds_to_stop(proc, init_pid) < 2
