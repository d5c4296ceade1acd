"""The page a throttled login gets (django-axes' AXES_LOCKOUT_CALLABLE): what happened, why,
and what to do, with HTTP 429."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def locked_out(request: HttpRequest, original_response=None, credentials=None) -> HttpResponse:
    """Render the lock-out page for the username (and address) that failed too often."""
    minutes = round(float(settings.AXES_COOLOFF_TIME) * 60)
    context = {
        "failure_limit": settings.AXES_FAILURE_LIMIT,
        "username_limit": settings.TRANCHE_LOGIN_USERNAME_FAILURE_LIMIT,
        "minutes": minutes,
        "is_admin": request.path.startswith("/admin/"),
    }
    response = render(request, "registration/locked_out.html", context, status=429)
    # The cool-off runs from the last failed attempt, which was this one.
    response["Retry-After"] = str(minutes * 60)
    return response
