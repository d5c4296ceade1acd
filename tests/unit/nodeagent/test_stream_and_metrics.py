"""Status stream frames (pending entries, per-entry acks, bounded buffer, jittered backoff)
and the Prometheus exposition of the same figures."""

from __future__ import annotations

import json

from prometheus_client import CollectorRegistry, generate_latest

from nodeagent.metrics import SliceMetrics
from nodeagent.slice_usage import IdleTracker, SliceUsage
from nodeagent.stream import StatusStream, backoff_delay, origin_of

POD = {
    "namespace": "acme-ml",
    "pod": "a",
    "uid": "u",
    "gpu_uuid": "GPU-1",
    "memory_limit_bytes": 8,
    "memory_used_bytes": 7,
    "rejected_allocations": 1,
    "compute_target_percent": 25,
    "compute_used_percent": 20.0,
    "throttled_seconds": 0.5,
    "processes": 1,
}

SLICE = SliceUsage(
    namespace="acme-ml", pod="a", claim="c", gpu_uuid="GPU-1", gpu_model="Tesla V100-PCIE-32GB",
    memory_used_bytes=7, memory_limit_bytes=8, compute_target_ratio=0.25,
    compute_used_ratio=0.2, rejected_allocations=1, throttled_seconds=0.5, busy_seconds=12.5,
    contexts=1, slots_in_use=1, idle_seconds=0.0,
)  # fmt: skip


def _frame(s: StatusStream) -> dict:
    return json.loads(s.next_frame())


def _ack(s: StatusStream, frame: dict, *refused: tuple[str, bool]) -> None:
    s.on_reply(
        {
            "ack": frame["seq"],
            "refused": [
                {"namespace": "acme-ml", "pod": pod, "reason": "not bound yet", "retry": retry}
                for pod, retry in refused
            ],
        }
    )


def test_acknowledged_entries_leave_and_removals_are_sent():
    s = StatusStream("ws://x/ws/agent/", "n", "t", full_every=3600)
    s.offer([], {("acme-ml", "a"): POD})
    first = _frame(s)
    assert first["full"]
    assert first["pods"] == [POD]
    _ack(s, first)
    s.offer([], {("acme-ml", "a"): POD})
    same = _frame(s)
    assert not same["full"]
    assert same["pods"] == []
    s.offer([], {})
    gone = _frame(s)
    assert gone["removed"] == [{"namespace": "acme-ml", "pod": "a"}]
    assert [m["seq"] for m in (first, same, gone)] == [1, 2, 3]
    _ack(s, gone)
    assert s.pending == {}


def test_a_refused_removal_travelling_with_an_unbound_pod_is_not_lost():
    """Issue #32: the frame carrying the old pod's removal also carried the new pod, which the
    portal did not know yet; the removal is applied on its own and the new pod goes again."""
    new = {**POD, "pod": "b", "uid": "u2"}
    s = StatusStream("ws://x/ws/agent/", "n", "t", full_every=3600)
    s.offer([], {("acme-ml", "a"): POD})
    _ack(s, _frame(s))
    s.offer([], {("acme-ml", "b"): new})  # Recreate: a gone, b new in the same sample
    frame = _frame(s)
    assert frame["removed"] == [{"namespace": "acme-ml", "pod": "a"}]
    assert frame["pods"] == [new]
    _ack(s, frame, ("b", True))  # the watcher has not bound b yet
    assert s.pending == {("acme-ml", "b"): new}
    assert "not bound yet" in s.refusals[("acme-ml", "b")]
    s.offer([], {("acme-ml", "b"): new})
    again = _frame(s)
    assert again["pods"] == [new]
    assert again["removed"] == []
    _ack(s, again)
    assert s.pending == {}
    assert s.refusals == {}


def test_lost_frames_go_again_and_a_newer_entry_is_not_acknowledged_by_an_older_frame():
    s = StatusStream("ws://x/ws/agent/", "n", "t", full_every=3600)
    s.offer([], {("acme-ml", "a"): POD})
    lost = _frame(s)
    s.on_reply({"error": "the portal could not store this message", "seq": lost["seq"]})
    s.offer([], {("acme-ml", "a"): POD})
    first = _frame(s)
    assert first["pods"] == [POD]  # unchanged since, but never stored: sent again
    newer = {**POD, "memory_used_bytes": 8}
    s.offer([], {("acme-ml", "a"): newer})
    _ack(s, first)  # acknowledges the older figures only
    assert s.pending == {("acme-ml", "a"): newer}
    _ack(s, _frame(s), ("a", False))  # refused for good: dropped, not retried
    assert s.pending == {}


def test_buffer_keeps_the_newest_entry_per_pod_bounded_and_counts_drops():
    s = StatusStream("ws://x/ws/agent/", "n", "t", max_pending=2, full_every=3600)
    for k in range(5):  # disconnected: samples pile up, one entry per pod
        s.offer([], {("acme-ml", "a"): {**POD, "memory_used_bytes": k}})
    assert s.pending == {("acme-ml", "a"): {**POD, "memory_used_bytes": 4}}
    assert s.dropped == 0
    pods = {("acme-ml", n): {**POD, "pod": n} for n in "bcd"}
    s.offer([], pods)  # a gone, b c d new: one slot for a report beside a's removal
    assert s.dropped == 3
    frame = _frame(s)
    assert frame["dropped"] == 3
    assert [p["pod"] for p in frame["pods"]] == ["d"]
    assert frame["removed"] == [{"namespace": "acme-ml", "pod": "a"}]  # never dropped
    _ack(s, frame)
    s.max_pending = 8
    s.offer([], pods)  # the drops forced a full sample: b and c are put back
    again = _frame(s)
    assert again["full"]
    assert sorted(p["pod"] for p in again["pods"]) == ["b", "c", "d"]


def test_findings_are_resent_until_acknowledged():
    finding = {"kind": "prepare-failed", "ts": 1.0, "namespace": "acme-ml", "subject": "c",
               "detail": "x"}  # fmt: skip
    s = StatusStream("ws://x/ws/agent/", "n", "t", full_every=3600)
    s.offer([], {}, [finding])
    lost = _frame(s)
    assert lost["findings"] == [finding]
    s.on_reply({"error": "down", "seq": lost["seq"]})
    s.offer([], {})
    again = _frame(s)
    assert again["findings"] == [finding]
    _ack(s, again)
    s.offer([], {})
    assert "findings" not in _frame(s)


def test_backoff_is_jittered_and_capped():
    delays = [backoff_delay(10, base=0.5, cap=30) for _ in range(200)]
    assert max(delays) <= 30
    assert len({round(d, 3) for d in delays}) > 100
    assert origin_of("wss://portal.example/ws/agent/") == "https://portal.example"


def test_metrics_names_and_values():
    registry = CollectorRegistry()
    m = SliceMetrics("n")
    registry.register(m)
    m.update([SLICE], [("GPU-1", "Tesla V100-PCIE-32GB", 40)], {"over-cap": 2})
    text = generate_latest(registry).decode()
    labels = (
        'claim="c",gpu_model="Tesla V100-PCIE-32GB",gpu_uuid="GPU-1",namespace="acme-ml",'
        'node="n",pod="a"'
    )
    assert f"tranche_slice_memory_used_bytes{{{labels}}} 7.0" in text
    assert f"tranche_slice_kernel_busy_seconds_total{{{labels}}} 12.5" in text
    assert f"tranche_slice_compute_target_ratio{{{labels}}} 0.25" in text
    assert f"tranche_slice_idle_seconds{{{labels}}} 0.0" in text
    assert "tranche_slice_rejected_allocations_total" in text
    assert "tranche_slice_throttled_seconds_total" in text
    assert (
        'tranche_gpu_utilization_ratio{gpu_model="Tesla V100-PCIE-32GB",gpu_uuid="GPU-1",'
        'node="n"} 0.4' in text
    )
    assert 'tranche_agent_backstop_actions_total{node="n",reason="over-cap"} 2.0' in text
    assert 'tranche_agent_backstop_actions_total{node="n",reason="no-claim"} 0.0' in text


def test_idle_tracker_counts_idle_time_and_resets_on_work():
    tracker = IdleTracker()
    assert tracker.observe(100.0, {"s": 0}) == {"s": (0.0, 0.0)}
    assert tracker.observe(110.0, {"s": 10_000_000}) == {"s": (0.001, 10.0)}  # 0.1 %: idle
    ratio, idle = tracker.observe(120.0, {"s": 2_510_000_000})["s"]  # 25 % busy: not idle
    assert (round(ratio, 3), idle) == (0.25, 0.0)
    assert tracker.observe(130.0, {}) == {}  # a slice gone is forgotten
