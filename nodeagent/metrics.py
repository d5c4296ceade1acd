"""Prometheus metrics of the agent: one series per slice and GPU, from the latest collected tick.

A custom collector renders the last sample on each scrape, so slices that went away disappear
from the next scrape instead of lingering as stale gauges. Labels are bounded: node, namespace,
pod, claim, gpu_uuid, gpu_model (names Kubernetes validated, never a tenant's free text).
Every family here is in docs/metrics.md's table (tests/integration/metrics diff the two).

The kernel-busy counter is the core's launch accounting (`compute_used_ns` in the region), read
as it is: `rate(tranche_slice_kernel_busy_seconds_total[1m])` per slice sums, over the slices of
one card, to NVML's `tranche_gpu_utilization_ratio` (what a whole-GPU exporter can tell).
"""

from __future__ import annotations

import threading

from prometheus_client import Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

SLICE_LABELS = ["node", "namespace", "pod", "claim", "gpu_uuid", "gpu_model"]
GPU_LABELS = ["node", "gpu_uuid", "gpu_model"]
# (family, kind, help, SliceUsage field)
SLICE_FAMILIES = (
    ("tranche_slice_memory_used_bytes", "gauge", "GPU memory the slice holds", "memory_used_bytes"),
    ("tranche_slice_memory_limit_bytes", "gauge", "GPU memory cap of the slice",
     "memory_limit_bytes"),
    ("tranche_slice_compute_used_ratio", "gauge",
     "kernel-busy time over wall time during the agent's last tick", "compute_used_ratio"),
    ("tranche_slice_compute_target_ratio", "gauge", "compute share sold", "compute_target_ratio"),
    ("tranche_slice_rejected_allocations", "counter", "allocations refused over the memory cap",
     "rejected_allocations"),
    ("tranche_slice_throttled_seconds", "counter", "time launches waited for compute budget",
     "throttled_seconds"),
    ("tranche_slice_kernel_busy_seconds", "counter",
     "device time the slice's kernels occupied the GPU (the core's launch accounting)",
     "busy_seconds"),
    ("tranche_slice_contexts", "gauge", "processes holding a CUDA context on the slice",
     "contexts"),
    ("tranche_slice_region_slots_in_use", "gauge",
     "slots of the claim's accounting region taken (of 64)", "slots_in_use"),
    ("tranche_slice_idle_seconds", "gauge",
     "how long the slice has run under 1% kernel-busy (0 while busy)", "idle_seconds"),
)  # fmt: skip

disable_created_metrics()  # no `_created` series: nothing reads them (docs/metrics.md)


class SliceMetrics(Collector):
    def __init__(self, node: str) -> None:
        self.node = node
        self._slices: list = []
        self._gpus: list[tuple[str, str, int | None]] = []
        self._backstop: dict[str, int] = {}
        self._lock = threading.Lock()
        self.health = None  # nodeagent.health.HealthMonitor, once the agent set it

    def update(self, slices: list, gpus=(), backstop: dict[str, int] | None = None) -> None:
        """`slices`: SliceUsage of the last tick; `gpus`: (uuid, model, NVML percent or None);
        `backstop`: backstop actions since start by reason."""
        with self._lock:
            self._slices = list(slices)
            self._gpus = list(gpus)
            self._backstop = dict(backstop or {})

    def collect(self):
        with self._lock:
            slices, gpus, backstop = list(self._slices), list(self._gpus), dict(self._backstop)
        for name, kind, doc, attr in SLICE_FAMILIES:
            cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            fam = cls(name, doc, labels=SLICE_LABELS)
            for s in slices:
                labels = [self.node, s.namespace, s.pod, s.claim, s.gpu_uuid, s.gpu_model]
                fam.add_metric(labels, getattr(s, attr))
            yield fam
        util = GaugeMetricFamily(
            "tranche_gpu_utilization_ratio",
            "NVML's whole-GPU utilisation: fraction of time a kernel ran",
            labels=GPU_LABELS,
        )
        for uuid, model, pct in gpus:
            if pct is not None:
                util.add_metric([self.node, uuid, model], pct / 100)
        yield util
        actions = CounterMetricFamily(
            "tranche_agent_backstop_actions",
            "processes the NVML backstop stopped, by reason (over-cap, over-share, no-claim)",
            labels=["node", "reason"],
        )
        for reason in ("over-cap", "over-share", "no-claim"):
            actions.add_metric([self.node, reason], backstop.get(reason, 0))
        yield actions
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


class AgentMetrics:
    """The agent's registry: the slice collector and the tick-duration histogram."""

    def __init__(self, node: str) -> None:
        self.registry = CollectorRegistry()
        self.slices = SliceMetrics(node)
        self.registry.register(self.slices)
        self.tick = Histogram(
            "tranche_agent_tick_seconds",
            "time one agent tick took (regions, NVML, backstop, status message)",
            ["node"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        ).labels(node)


def bearer_only(app, token: str):
    """WSGI: `app` for requests carrying `Authorization: Bearer <token>`, 401 for the rest. The
    agent's series name every tenant's namespace and pod on the node (#45: the chart served them
    on all interfaces to anyone)."""
    import hmac

    expected = f"Bearer {token}".encode()

    def guarded(environ, start_response):
        given = environ.get("HTTP_AUTHORIZATION", "").encode("latin-1", "replace")
        if not hmac.compare_digest(given, expected):
            start_response("401 Unauthorized", [("Content-Type", "text/plain; charset=utf-8"),
                                                ("WWW-Authenticate", "Bearer")])  # fmt: skip
            return [b"/metrics needs the agent's metrics token (Authorization: Bearer ...)\n"]
        return app(environ, start_response)

    return guarded


def serve(node: str, port: int, addr: str = "127.0.0.1", token: str = "") -> AgentMetrics:
    """Start the /metrics HTTP endpoint (behind `token` when given); returns the metrics."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args) -> None:
            pass

    metrics = AgentMetrics(node)
    app = make_wsgi_app(metrics.registry)
    server = make_server(addr, port, bearer_only(app, token) if token else app,
                         ThreadingWSGIServer, handler_class=Quiet)  # fmt: skip
    threading.Thread(target=server.serve_forever, daemon=True, name="metrics").start()
    return metrics
