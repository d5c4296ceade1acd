"""Pod attribution from /proc/<pid>/cgroup text, in every format kubelet produces, and the
PID-namespace translation of the interception core's pids."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodeagent import owners

UID = "1b2c3d4e-0000-4000-8000-000000000001"


@pytest.mark.parametrize(
    "text",
    [
        # cgroup v1, cgroupfs driver
        f"12:pids:/kubepods/besteffort/pod{UID}/4f1c0ffee\n11:memory:/kubepods/besteffort/"
        f"pod{UID}/4f1c0ffee\n",
        # cgroup v1, guaranteed QoS has no QoS folder
        f"4:memory:/kubepods/pod{UID}/4f1c0ffee\n",
        # cgroup v2, systemd driver (underscores in the UID)
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        f"{UID.replace('-', '_')}.slice/cri-containerd-4f1c.scope\n",
        # cgroup v2, guaranteed QoS, systemd driver
        f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-4f1c.scope\n",
        # inside a cgroup namespace the path is relative
        f"0::/../pod{UID}/c0\n",
    ],
)
def test_pod_uid_in_every_kubelet_layout(text: str) -> None:
    assert owners.pod_uid_from_cgroup(text) == UID


@pytest.mark.parametrize(
    "text",
    [
        "0::/\n",
        "0::/system.slice/containerd.service\n",
        "0::/user.slice/user-0.slice/session-3.scope\n",
        # a name that merely contains "pod" and a UID-like tail is not a pod cgroup
        f"0::/podman-{UID}.scope\n",
        f"0::/kubepods/besteffort/pod{UID}x/c0\n",
        "garbage without colons\n",
        "",
    ],
)
def test_not_a_pod(text: str) -> None:
    assert owners.pod_uid_from_cgroup(text) is None


def test_reads_the_real_proc_and_survives_a_vanished_process(tmp_path) -> None:
    own = (Path("/proc/self/cgroup")).read_text()
    assert owners.pod_uid(os.getpid()) == owners.pod_uid_from_cgroup(own)
    assert owners.pod_uid(2**22 + 17) is None  # beyond pid_max: gone
    fake = tmp_path / "proc" / "42"
    fake.mkdir(parents=True)
    (fake / "cgroup").write_text(f"8:pids:/kubepods/besteffort/pod{UID}/c0\n")
    assert owners.pod_uid(42, tmp_path / "proc") == UID


def test_ns_pid_is_the_innermost_namespace_pid(tmp_path) -> None:
    assert owners.ns_pid(os.getpid()) == os.getpid()  # this test runs in one namespace
    fake = tmp_path / "proc" / "4242"
    fake.mkdir(parents=True)
    (fake / "status").write_text("Name:\tpython\nNSpid:\t4242\t7\n")
    assert owners.ns_pid(4242, tmp_path / "proc") == 7
    assert owners.ns_pid(2**22 + 17) == 2**22 + 17


def _process(proc: Path, pid: int, start: int, pod: str, inner: int) -> None:
    """A /proc/<pid> entry as the kernel writes it: stat (start time is field 22; the name
    may hold ") "), cgroup and status."""
    entry = proc / str(pid)
    entry.mkdir(parents=True, exist_ok=True)
    rest = " ".join(["S", *["0"] * 18, str(start), "0", "0"])
    (entry / "stat").write_text(f"{pid} (a) b) {rest}\n")
    (entry / "cgroup").write_text(f"0::/kubepods/besteffort/pod{pod}/c0\n")
    (entry / "status").write_text(f"Name:\tpython\nNSpid:\t{pid}\t{inner}\n")


OTHER = "1b2c3d4e-0000-4000-8000-000000000002"


def test_owners_credit_a_reused_pid_to_its_new_process_not_the_last_ones_pod(tmp_path) -> None:
    proc = tmp_path / "proc"
    _process(proc, 42, start=1000, pod=UID, inner=7)
    whose = owners.Owners(proc)
    assert owners.start_time(42, proc) == 1000
    assert whose(42) == (UID, 7)
    # The process exits; another one, in another pod, gets pid 42: a new start time.
    _process(proc, 42, start=1234, pod=OTHER, inner=9)
    assert whose(42) == (OTHER, 9)
    (proc / "42" / "stat").unlink()  # gone: nobody's
    assert whose(42) == (None, 42)


def test_a_process_born_after_nvmls_listing_is_not_the_one_listed(tmp_path) -> None:
    proc = tmp_path / "proc"
    _process(proc, 42, start=1000, pod=UID, inner=7)
    whose = owners.Owners(proc)
    assert whose(42, listed_at=1000) == (UID, 7)  # started by the listing: the one listed
    # NVML listed pid 42 at tick 1500; by the lookup its process exited and a tenant's new
    # process got pid 42: it is not blamed for the listed process's GPU use.
    _process(proc, 42, start=1501, pod=OTHER, inner=9)
    assert whose(42, listed_at=1500) == (None, 42)
    assert whose(42, listed_at=1501) == (OTHER, 9)  # listed after it started: its own


def test_boot_ticks_is_the_start_time_clock() -> None:
    before = owners.boot_ticks()
    started = owners.start_time(os.getpid())
    assert started is not None
    assert started <= before  # this process began before now
    child = subprocess.Popen(["sleep", "5"])
    try:
        born = owners.start_time(child.pid)
        assert born is not None
        assert before <= born <= owners.boot_ticks()
    finally:
        child.kill()
        child.wait()


def test_owners_read_each_process_once_and_forget_the_unlisted(tmp_path) -> None:
    proc = tmp_path / "proc"
    _process(proc, 42, start=1000, pod=UID, inner=7)
    _process(proc, 43, start=1001, pod=OTHER, inner=8)
    whose = owners.Owners(proc)
    assert (whose(42), whose(43)) == ((UID, 7), (OTHER, 8))
    # Same pid, same start time: the same process, whose pod is not read again (a container
    # cannot move itself out of its pod's cgroup); this rewrite stands for a read saved.
    (proc / "42" / "cgroup").write_text("0::/\n")
    (proc / "43" / "cgroup").write_text("0::/\n")
    assert whose(42) == (UID, 7)
    whose.keep_only({42})  # 43 no longer listed by NVML: forgotten, read afresh if seen again
    assert (whose(42), whose(43)) == ((UID, 7), (None, 8))


def test_owners_read_the_real_proc(tmp_path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        whose = owners.Owners()
        expected = owners.pod_uid_from_cgroup(Path(f"/proc/{child.pid}/cgroup").read_text())
        assert whose(child.pid) == (expected, child.pid)
    finally:
        child.kill()
        child.wait()
    assert whose(child.pid) == (None, child.pid)  # reaped: gone


def test_a_zombie_leader_is_attributed_by_its_live_threads_cgroup(tmp_path) -> None:
    """A leader that left by SYS_exit reads "Z" and, on cgroup v1, "/" in its own cgroup file;
    the thread that keeps the process (and its device memory) still names the pod."""
    proc = tmp_path / "proc"
    (proc / "70" / "task" / "70").mkdir(parents=True)
    (proc / "70" / "task" / "71").mkdir()
    (proc / "70" / "cgroup").write_text("8:pids:/\n0::/\n")
    (proc / "70" / "task" / "70" / "cgroup").write_text("8:pids:/\n0::/\n")
    (proc / "70" / "task" / "71" / "cgroup").write_text(f"8:pids:/kubepods/pod{UID}/c0\n0::/\n")
    assert owners.pod_uid(70, proc) == UID
    (proc / "70" / "task" / "71" / "cgroup").write_text("8:pids:/\n0::/\n")  # a host process
    assert owners.pod_uid(70, proc) is None
