"""`/metrics` of the portal: readiness (`portal.core.metrics`), requests and sockets
(`portal.core.request_metrics`) and the business as operators see it
(`portal.billing.metrics`), rendered fresh per scrape. Every family is in docs/metrics.md.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry, generate_latest

from portal.billing.metrics import BusinessCollector
from portal.core import metrics as readiness_metrics
from portal.core import request_metrics
from portal.core.views import metrics_refusal


def render() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BusinessCollector())
    return readiness_metrics.render() + request_metrics.render() + generate_latest(registry)


@require_GET
@never_cache
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus metrics of the portal (docs/metrics.md): loopback, staff or the token."""
    refusal = metrics_refusal(request)
    if refusal is not None:
        return refusal
    return HttpResponse(render(), content_type="text/plain; version=0.0.4")
