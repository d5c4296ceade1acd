"""Health endpoints for load balancers, the chart's probes and the tests."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from portal.core.health import check_database, check_processes, check_redis


@require_GET
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    """The process is up and serving; says nothing about its dependencies."""
    return JsonResponse({"status": "ok"})


@require_GET
@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    """200 when PostgreSQL and Redis answer and no worker/beat/watcher heartbeat is stale, else
    503 with a message naming what is down or stale.

    `?scope=portal` checks only what this portal process needs to serve pages (PostgreSQL,
    Redis): the chart's readiness probe uses it, so a stale watcher being rescheduled does not take
    every portal replica out of its Service while the pages themselves work."""
    checks = {"database": check_database(), "redis": check_redis()}
    if checks["database"][0] and request.GET.get("scope") != "portal":
        checks["processes"] = check_processes()
    ready = all(ok for ok, _ in checks.values())
    body = {
        "status": "ready" if ready else "not ready",
        "checks": {name: {"ok": ok, "message": msg} for name, (ok, msg) in checks.items()},
    }
    if not ready:
        body["message"] = "; ".join(msg for ok, msg in checks.values() if not ok)
    return JsonResponse(body, status=200 if ready else 503)
