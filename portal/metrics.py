"""The portal's two Prometheus endpoints, rendered fresh per scrape (every family is in
docs/metrics.md):

- `/metrics`: what this process knows, readiness (`portal.core.metrics`), requests and sockets
  (`portal.core.request_metrics`); scraped from every portal pod (job `tranche-portal`), whose
  sums are the platform's.
- `/metrics/business`: the business as operators see it (`portal.billing.metrics`), read from
  the database, the same from every process; scraped once through the portal's Service (job
  `tranche-business`), so `sum()` over it counts each order and slice once whatever the number
  of portal replicas and processes.
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

CONTENT_TYPE = "text/plain; version=0.0.4"


def render() -> bytes:
    return readiness_metrics.render() + request_metrics.render()


def render_business() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BusinessCollector())
    return generate_latest(registry)


@require_GET
@never_cache
def metrics(request: HttpRequest) -> HttpResponse:
    """This process's metrics (docs/metrics.md): loopback, staff or the token."""
    refusal = metrics_refusal(request)
    if refusal is not None:
        return refusal
    return HttpResponse(render(), content_type=CONTENT_TYPE)


@require_GET
@never_cache
def business_metrics(request: HttpRequest) -> HttpResponse:
    """The database's figures (docs/metrics.md), to be scraped once: loopback, staff or the
    token."""
    refusal = metrics_refusal(request)
    if refusal is not None:
        return refusal
    return HttpResponse(render_business(), content_type=CONTENT_TYPE)
