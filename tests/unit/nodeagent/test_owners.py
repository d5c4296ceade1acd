"""Pod attribution from /proc/<pid>/cgroup text, in every format kubelet produces, and the
PID-namespace translation of the interception core's pids."""

from __future__ import annotations

import os
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
