"""The client's network address as the portal trusts it: one home for the login lock-out
(django-axes' AXES_CLIENT_IP_CALLABLE) and the sign-up throttle.

Behind `TRANCHE_TRUSTED_PROXY_HOPS` = N proxies, each appends the address it was connected from
to `X-Forwarded-For`, so the right-most N entries are the ones our proxies wrote and the N-th
from the right is the client as the outermost proxy saw it. Everything left of it is whatever
the client sent and is never read (taking the first entry, as `daphne --proxy-headers` does,
lets a client pick its own address: rotate it to escape a lock-out, or name someone else's to
lock them out). With N = 0 the header is ignored and the socket's peer is the client. A request
with fewer entries than N did not come through every proxy; its peer is used.
"""

from __future__ import annotations

from ipaddress import ip_address

from django.conf import settings
from django.http import HttpRequest


def client_address(request: HttpRequest) -> str:
    """The address the lock-out and throttles count against (the peer when nothing is trusted)."""
    peer = request.META.get("REMOTE_ADDR", "") or ""
    hops = int(getattr(settings, "TRANCHE_TRUSTED_PROXY_HOPS", 0))
    if hops <= 0:
        return peer
    # Django joins repeated headers with ",": every entry of every copy, in order.
    raw = request.META.get("HTTP_X_FORWARDED_FOR", "")
    entries = [part.strip() for part in raw.split(",") if part.strip()]
    if len(entries) < hops:
        return peer
    candidate = entries[-hops]
    try:
        return str(ip_address(candidate))
    except ValueError:  # our own proxy wrote it: garbage means misconfiguration, not the client
        return peer
