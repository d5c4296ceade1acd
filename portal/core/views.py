"""Health endpoints for load balancers, the chart's probes and the tests."""

from __future__ import annotations

import hmac
from ipaddress import ip_address

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from portal.core import health


def _may_see_detail(request: HttpRequest) -> bool:
    """Loopback callers (the kubelet's probe through a port-forward, operators on the host, the
    tests) and staff see what is down; anyone else only the verdict (/readyz
    named silent nodes to anyone). The session is read only when the caller sent one."""
    if ip_address(request.META.get("REMOTE_ADDR") or "0.0.0.0").is_loopback:  # noqa: S104
        return True
    if settings.SESSION_COOKIE_NAME not in request.COOKIES:
        return False
    try:
        return bool(request.user.is_staff)
    except DatabaseError:
        return False


@require_GET
@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    """200 when everything the scope needs answers, else 503 naming what is down or stale; every
    check bounded, so the answer comes within about a second (`portal.core.health`).

    - default: PostgreSQL (a new connection), Redis, and fresh worker/beat/watcher heartbeats;
    - `?scope=portal`: PostgreSQL and Redis only (the chart's readiness probe: a stale watcher
      being rescheduled must not take every portal replica out of its Service);
    - `?scope=controller`: the default plus the API server and the reconcile backlog (an order
      placed and not active for too long), what provisioning needs."""
    checks = health.evaluate(request.GET.get("scope", ""))
    ready = all(ok for ok, _ in checks.values())
    body: dict = {"status": "ready" if ready else "not ready"}
    if _may_see_detail(request):
        body["checks"] = {name: {"ok": ok, "message": msg} for name, (ok, msg) in checks.items()}
        if not ready:
            body["message"] = "; ".join(msg for ok, msg in checks.values() if not ok)
    return JsonResponse(body, status=200 if ready else 503)


def _scraper(request: HttpRequest) -> bool:
    """Loopback and staff (as /readyz's detail), or a bearer token equal to
    TRANCHE_METRICS_TOKEN when one is set (a Prometheus in the cluster is neither)."""
    if _may_see_detail(request):
        return True
    token = settings.METRICS_TOKEN
    sent = request.META.get("HTTP_AUTHORIZATION", "").removeprefix("Bearer ").strip()
    return bool(token) and hmac.compare_digest(sent.encode(), token.encode())


def metrics_refusal(request: HttpRequest) -> HttpResponse | None:
    """The 403 a request that may not read /metrics gets, else None (portal/status/metrics.py
    serves the metrics: the business figures live above this layer)."""
    if _scraper(request):
        return None
    return HttpResponse(
        "Metrics are for the platform's monitoring: send the bearer token set in "
        "TRANCHE_METRICS_TOKEN, or scrape from the host.\n",
        status=403, content_type="text/plain; charset=utf-8",
    )  # fmt: skip
