"""No liveness the tenant can fake frees a charge (issue #44, mechanism 1, and getpid).

At 083f417 a slot whose lock was free was reclaimed when /proc/<pid>/stat read 'Z'. A holder
that filled its slice, dropped its lock and ended its main thread with SYS_exit while another
thread kept the process (its descriptors and its memory) read 'Z', so the next process
scrubbed the slot and was given the whole slice again: 8 holders held 512 MiB on a 64 MiB
slice at every pace. Now the core asks the kernel, by pidfd, whether any thread of the group
lives, and records the pid the kernel gives it: a program may define getpid() itself, and one
naming a process that does not exist would have its slot scrubbed the same way (with libc's
getpid() in this design 4 such holders put 256 MiB on the card; 083f417 refused them the GPU,
its /proc check of the PID namespace disagreeing with the lie).

The shipped core is injected as the CDI edits inject it (tests/native/injected.py); the card's
own counter (simgpu through NVML, no core) is the ground truth; no agent or backstop runs.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.native.conftest import GpuBox, MiB
from tests.native.injected import start_injected

SLICE = 64 * MiB
CHUNK = 4 * MiB
HOLDERS = 4


def _held(proc: subprocess.Popen[str]) -> int:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("held"), line + (proc.stderr.read() if proc.stderr else "")
    return int(line.split()[1])


def _leader_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0]


@pytest.mark.parametrize(
    ("trick", "pace_s"), [("zombie", 0.05), ("zombie", 0.3), ("zombie", 2.0), ("liar", 0.05)]
)
def test_a_chain_of_holders_faking_their_death_never_exceeds_the_slice(
    any_box: GpuBox, trick: str, pace_s: float
) -> None:
    c = any_box.container("c", [(0, SLICE, 100)])
    chain = str(any_box.build.prog("chain"))
    holders: list[subprocess.Popen[str]] = []
    try:
        held = []
        for _ in range(HOLDERS):
            p = start_injected(any_box, c, [chain, trick, str(CHUNK)])
            holders.append(p)
            held.append(_held(p))
            time.sleep(pace_s)  # the pace of the chain, not a wait for a result
        if trick == "zombie":  # the premise: every leader reads as a zombie, its process lives
            assert [_leader_state(p.pid) for p in holders] == ["Z"] * HOLDERS
        physical = any_box.physical_used()
        mib = [h // MiB for h in held]
        print(f"{trick} at {pace_s}s: held {mib} MiB, card {physical // MiB} MiB")  # noqa: T201
        assert held[0] > SLICE // 2  # the first holder really filled its slice
        assert physical <= SLICE + CHUNK, (held, physical)
        assert sum(held) <= SLICE
    finally:
        for p in holders:
            p.communicate(timeout=30)  # closing stdin ends the keeper thread, and the process


def test_a_zombie_leaders_slot_is_reclaimed_once_its_last_thread_is_gone(any_box: GpuBox) -> None:
    """Liveness by thread group, not by leader: once the keeper thread exits too, the next
    process gets the slice back."""
    c = any_box.container("c", [(0, SLICE, 100)])
    chain = str(any_box.build.prog("chain"))
    first = start_injected(any_box, c, [chain, "zombie", str(CHUNK)])
    assert _held(first) > SLICE // 2
    first.communicate(timeout=30)
    second = start_injected(any_box, c, [chain, "hold", str(CHUNK)])
    try:
        assert _held(second) > SLICE // 2
    finally:
        second.communicate(timeout=30)
