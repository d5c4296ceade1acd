"""Outage pages: a request that fails because PostgreSQL or Redis is unreachable gets a 503 page
saying what is down and to try again shortly, instead of a bare 500.

`OutageMiddleware` turns such an exception raised by a view into that page (it works with
DEBUG on, where Django would show its debug page); `server_error` (the portal's handler500)
does the same for one raised elsewhere and is the plain 500 page otherwise. The page renders
without the database or a session, so it works during the outage it reports.
"""

from __future__ import annotations

import logging
import sys

import redis
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template import loader
from kombu.exceptions import OperationalError as BrokerError

from portal.core.dbbackend.base import PoolBusy

log = logging.getLogger("portal.outage")
RETRY_AFTER_SECONDS = 30
BUSY_RETRY_AFTER_SECONDS = 5
BUSY = "busy"  # not an outage: every database connection of this process is in use

# exception type -> what the tenant is told is down
DOWN = (
    ((OperationalError, InterfaceError), "the database"),
    ((redis.exceptions.ConnectionError, redis.exceptions.TimeoutError), "Redis (live updates)"),
    ((BrokerError,), "the provisioning queue"),
)


def what_is_down(exc: BaseException | None) -> str | None:
    if isinstance(exc, OperationalError) and isinstance(exc.__cause__, PoolBusy):
        return BUSY
    for types, name in DOWN:
        if isinstance(exc, types):
            return name
    return None


def outage_response(request: HttpRequest, down: str) -> HttpResponse:
    retry = BUSY_RETRY_AFTER_SECONDS if down == BUSY else RETRY_AFTER_SECONDS
    if request.path.startswith("/api/"):  # API clients get JSON, as the API's other errors
        if down == BUSY:
            message = "Tranche is busy: no database connection was free within a second."
        else:
            message = f"Tranche cannot reach {down} right now."
        message += f" Nothing you sent was kept; send it again in {retry} s."
        response = JsonResponse({"error": message, "retry_after_s": retry}, status=503)
    else:
        html = loader.get_template("503.html").render(
            {"down": down, "busy": down == BUSY, "retry": retry}
        )
        response = HttpResponse(html, status=503)
    response["Retry-After"] = str(retry)
    response["Cache-Control"] = "no-store"
    return response


class OutageMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        down = what_is_down(exc)
        if down is None:
            return None
        if down == BUSY:
            log.warning("%s %s: 503, busy (%s)", request.method, request.path, exc.__cause__)
        else:
            log.warning("%s %s: 503, %s unreachable (%s)", request.method, request.path, down, exc)
        return outage_response(request, down)


def server_error(request: HttpRequest) -> HttpResponse:
    down = what_is_down(sys.exc_info()[1])
    if down is not None:
        return outage_response(request, down)
    html = loader.get_template("500.html").render({})
    return HttpResponse(html, status=500)
