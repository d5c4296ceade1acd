"""Status stream message building (deltas, full snapshots, bounded buffer, jittered backoff)
and the Prometheus exposition of the same figures."""

from __future__ import annotations

import json

from prometheus_client import CollectorRegistry, generate_latest

from nodeagent.metrics import SliceMetrics
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


def test_deltas_carry_only_changes_and_removals():
    s = StatusStream("ws://x/ws/agent/", "n", "t", full_every=3600)
    s.offer([], {("acme-ml", "a"): POD})
    s.offer([], {("acme-ml", "a"): POD})
    s.offer([], {})
    first, same, gone = (json.loads(m) for m in s.buffer)
    assert first["full"]
    assert first["pods"] == [POD]
    assert not same["full"]
    assert same["pods"] == []
    assert gone["removed"] == [{"namespace": "acme-ml", "pod": "a"}]
    assert [m["seq"] for m in (first, same, gone)] == [1, 2, 3]


def test_buffer_drops_oldest_counts_and_forces_a_full_snapshot():
    s = StatusStream("ws://x/ws/agent/", "n", "t", buffer_size=2, full_every=3600)
    for _ in range(5):
        s.offer([], {("acme-ml", "a"): POD})
    kept = [json.loads(m) for m in s.buffer]
    assert s.dropped == 3
    assert [m["seq"] for m in kept] == [4, 5]
    assert kept[-1]["full"]
    assert kept[-1]["dropped"] == 3


def test_backoff_is_jittered_and_capped():
    delays = [backoff_delay(10, base=0.5, cap=30) for _ in range(200)]
    assert max(delays) <= 30
    assert len({round(d, 3) for d in delays}) > 100
    assert origin_of("wss://portal.example/ws/agent/") == "https://portal.example"


def test_metrics_names_and_values():
    registry = CollectorRegistry()
    m = SliceMetrics("n")
    registry.register(m)
    m.update([POD])
    text = generate_latest(registry).decode()
    assert (
        'tranche_slice_memory_used_bytes{gpu_uuid="GPU-1",namespace="acme-ml",node="n",pod="a"} 7.0'
        in text
    )
    assert "tranche_slice_memory_limit_bytes" in text
    assert "tranche_slice_rejected_allocations_total" in text
    assert "tranche_slice_throttled_seconds_total" in text
    assert "tranche_slice_compute_used_percent" in text
