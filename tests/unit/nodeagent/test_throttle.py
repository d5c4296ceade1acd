"""Finding a pod's freezer from a process's cgroup text, and the duty cycle written to it
(nodeagent/throttle.py), on made-up cgroup trees."""

from __future__ import annotations

import time

from nodeagent.checkpoint import Checkpoint
from nodeagent.status import Collector
from nodeagent.throttle import Throttle, pod_freezers

UID = "1b2c3d4e-0000-4000-8000-000000000001"


def test_cgroup_v1_uses_the_freezer_hierarchy_at_the_pods_own_level(tmp_path) -> None:
    pod = tmp_path / "freezer" / "kubepods" / "besteffort" / f"pod{UID}"
    (pod / "c0").mkdir(parents=True)
    (pod / "freezer.state").write_text("THAWED")
    text = (f"8:pids:/kubepods/besteffort/pod{UID}/c0\n"
            f"6:freezer:/kubepods/besteffort/pod{UID}/c0\n0::/\n")  # fmt: skip
    assert pod_freezers([text], tmp_path) == [pod / "freezer.state"]


def test_cgroup_v2_in_a_private_namespace_finds_the_pod_by_name(tmp_path) -> None:
    """The agent's own cgroup namespace shows another pod's path relative to its own root."""
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    name = f"kubepods-burstable-pod{UID.replace('-', '_')}.slice"
    pod = tmp_path / "kubepods.slice" / "kubepods-burstable.slice" / name
    (pod / "cri-containerd-4f1c.scope").mkdir(parents=True)
    (pod / "cgroup.freeze").write_text("0")
    text = f"0::/../../kubepods-burstable.slice/{name}/cri-containerd-4f1c.scope\n"
    assert pod_freezers([text], tmp_path) == [pod / "cgroup.freeze"]
    assert pod_freezers(["0::/system.slice/containerd.service\n"], tmp_path) == []


def test_a_held_pod_is_frozen_for_the_rest_of_each_period_and_thawed_when_released(
    tmp_path,
) -> None:
    freezer = tmp_path / "freezer.state"
    freezer.write_text("THAWED")
    throttle = Throttle(period_s=0.05)
    seen = []
    try:
        throttle.hold(("claim", "GPU-1"), [freezer], 0.2, time.monotonic() + 60, "why")
        deadline = time.monotonic() + 2
        while len(set(seen)) < 2 and time.monotonic() < deadline:
            seen.append(freezer.read_text())
            time.sleep(0.003)
        assert set(seen) == {"FROZEN", "THAWED"}
        throttle.release(("claim", "GPU-1"))
        time.sleep(0.12)  # two periods: nothing freezes it again
        assert freezer.read_text() == "THAWED"
        assert throttle.held(("claim", "GPU-1")) is None
    finally:
        throttle.close()
    assert freezer.read_text() == "THAWED"


def test_a_claim_that_left_the_node_is_let_go(tmp_path) -> None:
    """The collector releases holds of claims no longer prepared (their pods are gone)."""
    freezer = tmp_path / "freezer.state"
    freezer.write_text("THAWED")
    collector = Collector("n", Checkpoint(tmp_path / "checkpoint.json"), [],
                          nvml_process_memory=lambda uuid: {})  # fmt: skip
    try:
        collector.throttle.hold(("gone", "GPU-1"), [freezer], 0.2, time.monotonic() + 60, "why")
        collector.cross_check({})
        assert collector.throttle.held(("gone", "GPU-1")) is None
        assert freezer.read_text() == "THAWED"
    finally:
        collector.close()
