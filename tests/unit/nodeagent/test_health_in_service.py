"""Support's "mark in service" in the agent (`HealthMonitor.mark_in_service`): a failure seen
before the mark is dropped, with a recovery event, when the GPU answers; a GPU that does not
answer, or a failure after the mark, stays unhealthy. And the maintenance DeviceTaintRule the
controller applies for a GPU out for maintenance (a pure render)."""

from __future__ import annotations

from controller.render.device_taint_rule import maintenance_rule_name, render_maintenance_rule
from nodeagent.health import HealthMonitor
from nodeagent.stream import StatusStream
from nodeagent.xid import LOST, classify_xid
from tests.helpers.gpus import NODE

GPU = "GPU-51a1a7ed-0000-4000-8000-000000000000"


def _monitor(clock: list[float]) -> tuple[HealthMonitor, list[int]]:
    woken: list[int] = []
    monitor = HealthMonitor([], clock=lambda: clock[0])
    monitor.on_change = lambda: woken.append(1)
    return monitor, woken


def test_a_failure_before_the_mark_is_dropped_when_the_gpu_answers():
    clock = [1000.0]
    monitor, woken = _monitor(clock)
    monitor._fail(GPU, classify_xid(48), 48)
    monitor.take_events()
    clock[0] = 1010.0
    assert monitor.mark_in_service(GPU, at=1005.0)
    assert monitor.unhealthy() == {}
    (event,) = monitor.take_events()
    assert (event.recovered, event.xid) == (True, 48)
    assert "in service" in event.meaning
    assert len(woken) == 2  # the failure, then the mark: the agent republishes at once
    assert not monitor.mark_in_service(GPU, at=1005.0)  # the portal repeats it: nothing more
    assert monitor.take_events() == []


def test_a_gpu_that_does_not_answer_or_failed_after_the_mark_stays_unhealthy():
    clock = [1000.0]
    monitor, _ = _monitor(clock)
    monitor._fail(GPU, classify_xid(48), 48)
    assert not monitor.mark_in_service(GPU, at=999.0)  # the mark predates this failure
    assert GPU in monitor.unhealthy()
    other = "GPU-lost"
    monitor._lost.add(other)
    monitor._fail(other, LOST, None)
    assert not monitor.mark_in_service(other, at=2000.0)  # it does not answer
    assert set(monitor.unhealthy()) == {GPU, other}


def test_the_portal_answer_reaches_the_monitor():
    stream = StatusStream("ws://portal/ws/agent/", NODE, "t")
    told: list[tuple[str, float]] = []
    stream.on_in_service = lambda gpu, at: told.append((gpu, at))
    stream.on_reply({"ack": 0, "in_service": [{"gpu": GPU, "at": 12.5}]})
    stream.on_reply({"ack": 0})
    assert told == [(GPU, 12.5)]


def test_the_maintenance_rule_taints_that_one_device_no_schedule():
    rule = render_maintenance_rule(NODE, "gpu-2", GPU)
    assert (rule["apiVersion"], rule["kind"]) == ("resource.k8s.io/v1", "DeviceTaintRule")
    assert rule["spec"] == {
        "deviceSelector": {"driver": "gpu.tranche.dev", "pool": NODE, "device": "gpu-2"},
        "taint": {"key": "tranche.dev/gpu-maintenance", "value": "maintenance",
                  "effect": "NoSchedule"},
    }  # fmt: skip
    assert rule["metadata"]["name"] == maintenance_rule_name(NODE, "gpu-2")
    assert maintenance_rule_name(NODE, "gpu-2") != maintenance_rule_name(NODE + "x", "gpu-2")
    assert len(maintenance_rule_name("n" * 253, "gpu-2")) <= 63
    assert rule == render_maintenance_rule(NODE, "gpu-2", GPU)  # pure
