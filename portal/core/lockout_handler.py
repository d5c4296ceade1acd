"""django-axes' database handler with a per-username lock besides the per-(username, address)
one (AXES_HANDLER).

AXES_LOCKOUT_PARAMETERS keeps the pair: AXES_FAILURE_LIMIT wrong passwords for one username from
one address pause that pair only, so a colleague's typos elsewhere lock nobody else. An attacker
with many addresses (a botnet, or a proxy chain) gets one pair each, so the username is also
paused once TRANCHE_LOGIN_USERNAME_FAILURE_LIMIT failures from all addresses together fall in the
cool-off window. That limit is higher on purpose: anyone who knows a username can use it to
pause that account for everyone, so it must take a real campaign, not five guesses.
"""

from __future__ import annotations

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Sum


def username_failures(request, credentials: dict | None) -> int:
    """Failures for the request's username from every address within the cool-off."""
    username = get_client_username(request, credentials)
    if not username:
        return 0
    rows = AccessAttempt.objects.filter(
        username=username, attempt_time__gte=get_cool_off_threshold(request)
    )
    return rows.aggregate(total=Sum("failures_since_start"))["total"] or 0


class LockoutHandler(AxesDatabaseHandler):
    """The pair's failures, raised to the lock-out limit when the username's total reached
    its own limit (axes compares `get_failures` with AXES_FAILURE_LIMIT both when it records
    a failure and before it lets a login try)."""

    def get_failures(self, request, credentials: dict | None = None) -> int:
        pair = super().get_failures(request, credentials)
        if username_failures(request, credentials) >= settings.TRANCHE_LOGIN_USERNAME_FAILURE_LIMIT:
            return max(pair, settings.AXES_FAILURE_LIMIT)
        return pair
