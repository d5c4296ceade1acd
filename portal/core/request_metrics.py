"""The portal's own Prometheus metrics: requests by view, sockets open, agent frames.

Labels are bounded: a request's `view` is its URL pattern's name (never the raw path: a
tenant's ids or a scanner's junk would each make a series), "unmatched" for a 404 of no
route; `code` its status class. With `PROMETHEUS_MULTIPROC_DIR` set (several portal processes,
issue #35) every process writes its samples there and `/metrics` sums them
(prometheus_client's multiprocess mode; the sockets gauge is `livesum`: live processes only);
without it the process serves its own. Every family is in docs/metrics.md's table.
"""

from __future__ import annotations

import functools
import os
import time

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

REGISTRY = CollectorRegistry(auto_describe=True)
SOCKET_KINDS = ("agent", "project", "fleet")
FRAME_RESULTS = ("accepted", "refused", "unstored")
# why the ingest refused a GPU health finding (portal/agents/health_admission.py)
HEALTH_REFUSAL_CAUSES = ("gpu", "pod", "claim", "time")
disable_created_metrics()  # no `_created` series: nothing reads them (docs/metrics.md)


@functools.cache
def families() -> dict:
    """The portal's families, made on first use in a portal process (middleware, consumers,
    /metrics): in multiprocess mode a family made at import would be in every importing
    process's files, the Celery worker's too (it imports portal modules)."""
    requests = Histogram(
        "tranche_portal_request_duration_seconds",
        "time the portal took to answer a request, by view (URL pattern name) and status class",
        ["view", "code"],
        buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
        registry=REGISTRY,
    )
    sockets = Gauge(
        "tranche_portal_socket_connections",
        "websockets open, by kind (agent, project live page, fleet console)",
        ["kind"],
        registry=REGISTRY,
        multiprocess_mode="livesum",
    )
    frames = Counter(
        "tranche_portal_agent_frames",
        "status messages from node agents, by result (accepted, refused, unstored)",
        ["result"],
        registry=REGISTRY,
    )
    health_refused = Counter(
        "tranche_portal_agent_health_refused",
        "GPU health findings of node agents the portal refused, by cause (gpu, pod, claim, time)",
        ["cause"],
        registry=REGISTRY,
    )
    for cause in HEALTH_REFUSAL_CAUSES:
        health_refused.labels(cause)
    for kind in SOCKET_KINDS:
        sockets.labels(kind)
    for result in FRAME_RESULTS:
        frames.labels(result)
    return {
        "requests": requests,
        "sockets": sockets,
        "frames": frames,
        "health_refused": health_refused,
    }


def count_frame(result: str) -> None:
    """One agent status message, `accepted`, `refused` or `unstored`."""
    families()["frames"].labels(result).inc()


def count_health_refused(cause: str) -> None:
    """One GPU health finding the ingest refused, by cause (HEALTH_REFUSAL_CAUSES)."""
    families()["health_refused"].labels(cause).inc()


def render() -> bytes:
    """This process's samples, or every portal process's under PROMETHEUS_MULTIPROC_DIR."""
    families()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest(REGISTRY)


class RequestMetricsMiddleware:
    """Times every request and files it under its view's name (outermost but security)."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response
        self.requests = families()["requests"]

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        view = (match.view_name or "unnamed") if match else "unmatched"
        self.requests.labels(view, f"{response.status_code // 100}xx").observe(
            time.perf_counter() - started
        )
        return response


class CountedSocket:
    """Mixin before the Channels consumer class: counts the socket while it is accepted."""

    socket_kind = "project"
    _counted = False

    async def accept(self, *args, **kwargs) -> None:
        await super().accept(*args, **kwargs)
        if not self._counted:
            self._counted = True
            families()["sockets"].labels(self.socket_kind).inc()

    async def websocket_disconnect(self, message) -> None:
        if self._counted:
            self._counted = False
            families()["sockets"].labels(self.socket_kind).dec()
        await super().websocket_disconnect(message)
