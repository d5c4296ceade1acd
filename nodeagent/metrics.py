"""Prometheus metrics of the agent, one series per pod and GPU, from the latest collected status.

A custom collector renders the last sample on each scrape, so pods that went away disappear
from the next scrape instead of lingering as stale gauges.
"""

from __future__ import annotations

import threading

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

LABELS = ["node", "namespace", "pod", "gpu_uuid"]


class SliceMetrics(Collector):
    def __init__(self, node: str) -> None:
        self.node = node
        self._pods: list[dict] = []
        self._lock = threading.Lock()
        self.health = None  # nodeagent.health.HealthMonitor, once the agent set it

    def update(self, pods: list[dict]) -> None:
        with self._lock:
            self._pods = list(pods)

    def collect(self):
        with self._lock:
            pods = list(self._pods)
        fams = {
            "memory_used": GaugeMetricFamily(
                "tranche_slice_memory_used_bytes", "GPU memory the slice holds", labels=LABELS
            ),
            "memory_limit": GaugeMetricFamily(
                "tranche_slice_memory_limit_bytes", "GPU memory cap of the slice", labels=LABELS
            ),
            "compute_used": GaugeMetricFamily(
                "tranche_slice_compute_used_percent",
                "share of the GPU's time used over the last interval",
                labels=LABELS,
            ),
            "compute_target": GaugeMetricFamily(
                "tranche_slice_compute_target_percent", "compute share sold", labels=LABELS
            ),
            "rejected": CounterMetricFamily(
                "tranche_slice_rejected_allocations",
                "allocations refused over the memory cap",
                labels=LABELS,
            ),
            "throttled": CounterMetricFamily(
                "tranche_slice_throttled_seconds",
                "time launches waited for compute budget",
                labels=LABELS,
            ),
        }
        for p in pods:
            labels = [self.node, p["namespace"], p["pod"], p["gpu_uuid"]]
            fams["memory_used"].add_metric(labels, p["memory_used_bytes"])
            fams["memory_limit"].add_metric(labels, p["memory_limit_bytes"])
            fams["compute_used"].add_metric(labels, p["compute_used_percent"])
            fams["compute_target"].add_metric(labels, p["compute_target_percent"])
            fams["rejected"].add_metric(labels, p["rejected_allocations"])
            fams["throttled"].add_metric(labels, p["throttled_seconds"])
        yield from fams.values()
        if self.health is not None:
            yield from self._health_families()

    def _health_families(self):
        healthy = GaugeMetricFamily(
            "tranche_gpu_healthy",
            "1 while the GPU is healthy, 0 while the agent holds it failed (tainted NoExecute)",
            labels=["node", "gpu_uuid", "model", "reason"],
        )
        unhealthy = self.health.unhealthy()
        for uuid, gpu in self.health.gpus.items():
            bad = unhealthy.get(uuid)
            reason = bad.verdict.taint_value if bad else ""
            healthy.add_metric([self.node, uuid, gpu.name, reason], 0 if bad else 1)
        events = CounterMetricFamily(
            "tranche_gpu_health_events",
            "GPU health events seen by the agent, by XID (or ecc/lost) and severity",
            labels=["node", "gpu_uuid", "xid", "severity"],
        )
        for (uuid, xid, severity), n in sorted(self.health.counts.items()):
            events.add_metric([self.node, uuid, xid, severity], n)
        yield healthy
        yield events


def serve(node: str, port: int, addr: str = "127.0.0.1") -> SliceMetrics:
    """Start the /metrics HTTP endpoint; returns the collector to update."""
    from prometheus_client import start_http_server

    registry = CollectorRegistry()
    metrics = SliceMetrics(node)
    registry.register(metrics)
    start_http_server(port, addr=addr, registry=registry)
    return metrics
