"""A live holder hidden from /proc, or whose /proc lies, keeps its charge (issue #44, mechanism 7;
a forged start time; a forged PID namespace).

Where unprivileged user namespaces work, a tenant without CAP_SYS_ADMIN can make a mount
namespace of its own and bind an empty folder over /proc/<holder>. At 083f417 the next process
started there read the holder's stat as missing, took it for dead and scrubbed its slot once
the holder had dropped its lock: 6 such holders held 384 MiB on a 64 MiB slice. Likewise a
holder that bound a stat file with another start time over its own /proc/<pid>/stat recorded
that time in its slot, and its peers, reading the real one, took its pid for reused. The core
now asks the kernel by pidfd, which no mount changes, and reads no start time to judge. And a
process in a PID namespace of its own, whose /proc/self/ns/pid showed the container's (a bind
mount of that namespace's file), judged the container's slots by a /proc where none of their
pids exists; the core now names its own namespace by pidfd.

On the real node the runtime's RuntimeDefault seccomp profile refuses `unshare`, so this needs
a box where user namespaces work; elsewhere the test is skipped with that reason. The shipped
core is injected as the CDI edits inject it; simgpu's counter is the ground truth.
"""

from __future__ import annotations

import shlex
import subprocess
import time

import pytest

from tests.native.conftest import GpuBox, MiB
from tests.native.injected import start_injected

SLICE = 64 * MiB
CHUNK = 4 * MiB
HOLDERS = 4
# The tenant: root in the container without CAP_SYS_ADMIN, in a user and mount namespace of
# its own (root there, over that namespace's mounts only).
TENANT_USERNS = [
    "setpriv", "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin",
    "unshare", "--user", "--map-root-user", "--mount", "--propagation", "private",
]  # fmt: skip


def _userns_refused() -> str | None:
    probe = subprocess.run(
        [*TENANT_USERNS, "true"], capture_output=True, text=True, timeout=30, check=False
    )
    if probe.returncode != 0:
        return "unprivileged user namespaces are refused here: " + probe.stderr.strip()
    return None


def _held(proc: subprocess.Popen[str]) -> int:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("held"), line + (proc.stderr.read() if proc.stderr else "")
    return int(line.split()[1])


def test_holders_hidden_by_a_bind_mount_over_their_proc_keep_their_charge(
    any_box: GpuBox,
) -> None:
    why = _userns_refused()
    if why:
        pytest.skip(why)
    c = any_box.container("c", [(0, SLICE, 100)])
    chain = str(any_box.build.prog("chain"))
    empty = any_box.tmp / "empty"
    empty.mkdir()
    holders: list[subprocess.Popen[str]] = []
    try:
        held = []
        for _ in range(HOLDERS):
            # Every earlier holder (each dropped its slot lock) is hidden from this one.
            masks = [f"mount --bind {shlex.quote(str(empty))} /proc/{p.pid}" for p in holders]
            script = "; ".join(["set -e", *masks, f"exec {chain} unlock {CHUNK}"])
            p = start_injected(any_box, c, [*TENANT_USERNS, "sh", "-c", script])
            holders.append(p)
            held.append(_held(p))
            time.sleep(0.05)  # the pace of the chain, not a wait for a result
        physical = any_box.physical_used()
        print(f"masked: held {[h // MiB for h in held]} MiB, card {physical // MiB} MiB")  # noqa: T201
        assert held[0] > SLICE // 2  # the first holder really filled its slice
        assert physical <= SLICE + CHUNK, (held, physical)
        assert sum(held) <= SLICE
    finally:
        for p in holders:
            p.communicate(timeout=30)


def test_holders_that_forged_their_own_start_time_keep_their_charge(any_box: GpuBox) -> None:
    why = _userns_refused()
    if why:
        pytest.skip(why)
    c = any_box.container("c", [(0, SLICE, 100)])
    chain = str(any_box.build.prog("chain"))
    holders: list[subprocess.Popen[str]] = []
    try:
        held = []
        for _ in range(HOLDERS):
            # In its own mount namespace the holder's /proc/<pid>/stat says it started 1000
            # ticks later than it did (sh's pid is the holder's: it execs); its peers see the truth.
            fake = shlex.quote(str(any_box.tmp / "stat"))
            script = "; ".join([
                "set -e",
                f"awk '{{ $22 = $22 + 1000; print }}' /proc/$$/stat > {fake}.$$",
                f"mount --bind {fake}.$$ /proc/$$/stat",
                f"exec {chain} unlock {CHUNK}",
            ])  # fmt: skip
            p = start_injected(any_box, c, [*TENANT_USERNS, "sh", "-c", script])
            holders.append(p)
            held.append(_held(p))
            time.sleep(0.05)  # the pace of the chain, not a wait for a result
        physical = any_box.physical_used()
        print(f"forged: held {[h // MiB for h in held]} MiB, card {physical // MiB} MiB")  # noqa: T201
        assert held[0] > SLICE // 2
        assert physical <= SLICE + CHUNK, (held, physical)
        assert sum(held) <= SLICE
    finally:
        for p in holders:
            p.communicate(timeout=30)


def test_a_process_forging_its_pid_namespace_does_not_judge_the_containers_slots(
    any_box: GpuBox,
) -> None:
    why = _userns_refused()
    if why:
        pytest.skip(why)
    c = any_box.container("c", [(0, SLICE, 100)])
    chain = str(any_box.build.prog("chain"))
    tmp = shlex.quote(str(any_box.tmp))
    # In a PID namespace of its own (its own /proc), the container's namespace file (held open
    # as fd 3 from before) is bound where /proc/self/ns/pid is read.
    forge = "; ".join([
        "set -e",
        f"d=$(mktemp -d -p {tmp})",
        'mount -t tmpfs ns "$d"',
        ': > "$d/pid"',
        'mount --bind /proc/self/fd/3 "$d/pid"',
        'mount --rbind "$d" /proc/$$/ns',
        f"exec {chain} unlock {CHUNK}",
    ])  # fmt: skip
    inner = [*TENANT_USERNS, "--pid", "--fork", "--mount-proc", "sh", "-c", forge]
    attacker = ["sh", "-c", "exec 3</proc/self/ns/pid; exec " + shlex.join(inner)]
    holders: list[subprocess.Popen[str]] = []
    try:
        holders.append(start_injected(any_box, c, [chain, "unlock", str(CHUNK)]))
        held = [_held(holders[0])]
        for _ in range(HOLDERS - 1):
            p = start_injected(any_box, c, attacker)
            holders.append(p)
            held.append(_held(p))
            time.sleep(0.05)  # the pace of the chain, not a wait for a result
        physical = any_box.physical_used()
        print(f"pid ns: held {[h // MiB for h in held]} MiB, card {physical // MiB} MiB")  # noqa: T201
        assert held[0] > SLICE // 2
        assert physical <= SLICE + CHUNK, (held, physical)
        assert sum(held) <= SLICE
    finally:
        errors = [p.communicate(timeout=30)[1] for p in holders]
    # The attackers had the GPU (their slots judged by no one): the slice was full, not refused.
    assert not any("GPU access refused" in e for e in errors), errors
