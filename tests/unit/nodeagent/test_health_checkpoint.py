"""The agent's GPU health state survives its restart (issue #34): the unhealthy GPUs are
checkpointed in the state folder, so a new HealthMonitor (the restarted agent) holds the same
GPUs unhealthy, with the same time and XID (the same taint, byte for byte); a recovery or a
mark in service is checkpointed too; a lost GPU that answers after the restart recovers as it
would have; a GPU the node no longer has, or an unreadable file, is not held against it."""

from __future__ import annotations

from nodeagent.health import HealthMonitor
from nodeagent.slices import device_taint
from nodeagent.xid import LOST, classify_xid
from tests.helpers.gpus import v100


def _taints(monitor: HealthMonitor) -> dict:
    return {u.uuid: device_taint(u.verdict.taint_value, u.since)
            for u in monitor.unhealthy().values()}  # fmt: skip


def test_a_restarted_agent_keeps_the_failed_gpu_tainted(tmp_path):
    gpus = [v100(0), v100(1)]
    state = tmp_path / "gpu-health.json"
    first = HealthMonitor(gpus, clock=lambda: 1000.0, checkpoint=state)
    first._fail(gpus[0].uuid, classify_xid(48), 48)
    before = _taints(first)
    assert before[gpus[0].uuid]["value"] == "xid-48"

    again = HealthMonitor(gpus, clock=lambda: 2000.0, checkpoint=state)  # the restart
    assert _taints(again) == before
    (u,) = again.unhealthy().values()
    assert (u.xid, u.since, u.verdict.meaning) == (48, 1000.0, classify_xid(48).meaning)

    assert again.mark_in_service(gpus[0].uuid, at=1500.0)
    assert HealthMonitor(gpus, checkpoint=state).unhealthy() == {}  # the mark outlives it too


def test_a_lost_gpu_answering_after_the_restart_recovers(tmp_path):
    gpus = [v100(0)]
    state = tmp_path / "gpu-health.json"
    first = HealthMonitor(gpus, clock=lambda: 1000.0, checkpoint=state)
    first._lost.add(gpus[0].uuid)
    first._fail(gpus[0].uuid, LOST, None)
    again = HealthMonitor(gpus, checkpoint=state)
    assert gpus[0].uuid in again._lost  # its answering again is its recovery
    assert not again.mark_in_service(gpus[0].uuid, at=5000.0)  # it does not answer yet


def test_gpus_gone_and_unreadable_checkpoints_hold_nothing(tmp_path):
    state = tmp_path / "gpu-health.json"
    first = HealthMonitor([v100(0), v100(1)], clock=lambda: 1000.0, checkpoint=state)
    first._fail(v100(1).uuid, classify_xid(79), 79)
    assert HealthMonitor([v100(0)], checkpoint=state).unhealthy() == {}  # GPU 1 is gone
    state.write_text("{not json")
    assert HealthMonitor([v100(0), v100(1)], checkpoint=state).unhealthy() == {}
    assert HealthMonitor([v100(0)], checkpoint=tmp_path / "absent.json").unhealthy() == {}


def test_the_xid_that_arrives_after_the_loss_names_the_taint(tmp_path):
    # A GPU off the bus stops answering at once; the poll can see that before its XID.
    gpus = [v100(0)]
    now = [1000.0]
    monitor = HealthMonitor(gpus, clock=lambda: now[0], checkpoint=tmp_path / "h.json")
    monitor._fail(gpus[0].uuid, LOST, None)
    now[0] = 1000.5
    monitor._fail(gpus[0].uuid, classify_xid(79), 79)
    now[0] = 1001.0
    monitor._fail(gpus[0].uuid, classify_xid(48), 48)  # a cause already named stays
    (held,) = monitor.unhealthy().values()
    assert (held.xid, held.verdict.taint_value, held.since) == (79, "xid-79", 1000.0)
    again = HealthMonitor(gpus, clock=lambda: 2000.0, checkpoint=tmp_path / "h.json")
    assert _taints(again) == _taints(monitor)
