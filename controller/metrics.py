"""The controller's and the watcher's Prometheus metrics, on by default.

The Celery worker (prefork: tasks run in child processes) serves them from its parent when it
is ready, on `TRANCHE_CONTROLLER_METRICS_PORT` (default 9410); the watcher on
`TRANCHE_WATCHER_METRICS_PORT` (default 9411); 0 turns one off. With `PROMETHEUS_MULTIPROC_DIR`
set (what `make run` and the chart give the worker) each child writes its samples there and the
parent's endpoint sums them (prometheus_client's multiprocess mode); without it a process serves
its own. A port already taken is logged and the process runs on: its work matters more.

Queue depth and age are read from the broker at scrape time: the depth is the list's length,
the age that of its oldest message's `sent_at` header (portal/core/queue.py stamps it).
Every family is in docs/metrics.md's table.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

disable_created_metrics()  # no `_created` series: nothing reads them (docs/metrics.md)

log = logging.getLogger(__name__)
WORKER_PORT = 9410
WATCHER_PORT = 9411
OUTCOMES = ("applied", "failed", "retried", "gone")

# One registry per process kind; each one's families are made on first use, so the worker's
# endpoint never shows the watcher's families nor the reverse (in multiprocess mode a family
# made in a process is in its files, whatever the registry).
WORKER = CollectorRegistry()
WATCHER = CollectorRegistry()


@functools.cache
def _worker() -> dict:
    reconcile = Histogram(
        "tranche_reconcile_duration_seconds",
        "time one reconcile_project task took, by outcome (applied, failed, retried, gone)",
        ["outcome"],
        buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
        registry=WORKER,
    )
    for outcome in OUTCOMES:  # every outcome's series exists from the start (rates read 0)
        reconcile.labels(outcome)
    return {
        "reconcile": reconcile,
        "resync": Histogram(
            "tranche_resync_duration_seconds",
            "time one periodic resync of every project took",
            buckets=(0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0),
            registry=WORKER,
        ),
        "writes": Counter(
            "tranche_resync_writes",
            "writes to the API server the periodic resyncs made (drift repaired)",
            registry=WORKER,
        ),
    }


@functools.cache
def _watcher() -> dict:
    flushes = Counter(
        "tranche_watch_flushes",
        "watcher flushes to the portal, by result (ok, failed)",
        ["result"],
        registry=WATCHER,
    )
    for result in ("ok", "failed"):
        flushes.labels(result)
    lag = Histogram(
        "tranche_watch_lag_seconds",
        "time from a watch event's arrival at the watcher to its namespace written to the portal",
        buckets=(0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
        registry=WATCHER,
    )
    return {"flushes": flushes, "lag": lag}


class QueueCollector(Collector):
    """The controller's Celery queue in Redis: messages waiting and the oldest one's age."""

    def __init__(self, url: str, queue: str) -> None:
        self.url, self.queue = url, queue

    def collect(self):
        import redis

        depth = GaugeMetricFamily(
            "tranche_queue_depth", "messages waiting in the controller's queue", labels=["queue"]
        )
        age = GaugeMetricFamily(
            "tranche_queue_oldest_age_seconds",
            "age of the oldest waiting message (0 when the queue is empty)",
            labels=["queue"],
        )
        try:
            client = redis.Redis.from_url(self.url, socket_connect_timeout=1, socket_timeout=1)
            n = client.llen(self.queue)
            oldest = client.lindex(self.queue, -1) if n else None  # LPUSHed: the tail is oldest
            client.close()
        except Exception as exc:  # the broker is down: no sample (the alert sees it absent)
            log.debug("queue metrics unreadable: %s", exc)
            return
        depth.add_metric([self.queue], n)
        age.add_metric([self.queue], _age(oldest))
        yield depth
        yield age


def _age(raw: bytes | str | None) -> float:
    if not raw:
        return 0.0
    try:
        sent = json.loads(raw).get("headers", {}).get("sent_at")
        return max(0.0, time.time() - float(sent)) if sent else 0.0
    except (ValueError, TypeError, AttributeError):
        return 0.0


def _registry(own: CollectorRegistry) -> CollectorRegistry:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return own


def serve(env_name: str, default: int, queue: tuple[str, str] | None = None) -> int:
    """Start this process's /metrics on 127.0.0.1 or TRANCHE_METRICS_ADDR; returns the port (0:
    off or not started). `queue`: (broker URL, queue name): the worker's endpoint, with the
    queue's depth and age; None: the watcher's."""
    port = int(os.environ.get(env_name, str(default)) or 0)
    if not port:
        return 0
    if queue is not None:
        _worker()
        registry = _registry(WORKER)
        registry.register(QueueCollector(*queue))
    else:
        _watcher()
        registry = _registry(WATCHER)
    addr = os.environ.get("TRANCHE_METRICS_ADDR", "127.0.0.1")
    try:
        start_http_server(port, addr=addr, registry=registry)
    except OSError as exc:
        log.error("no /metrics on %s:%d: %s", addr, port, exc)
        return 0
    log.info("metrics on http://%s:%d/metrics", addr, port)
    return port


def observe_reconcile(outcome: str, seconds: float) -> None:
    _worker()["reconcile"].labels(outcome).observe(seconds)


def observe_resync(seconds: float, writes: int) -> None:
    _worker()["resync"].observe(seconds)
    _worker()["writes"].inc(writes)


def observe_flush(ok: bool, lag: float | None) -> None:
    m = _watcher()
    m["flushes"].labels("ok" if ok else "failed").inc()
    if ok and lag is not None:
        m["lag"].observe(lag)
