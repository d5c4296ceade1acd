"""The websocket Origin check: a socket is accepted only from the portal's own origin.

Channels' `AllowedHostsOriginValidator` compares the Origin's host name with ALLOWED_HOSTS and
ignores scheme and port, so a page on `http://127.0.0.1:6666` or `https://localhost:1` could
open a logged-in user's socket. Here the Origin must equal, in scheme, host and port, the origin
the request was made to (its Host header; https when the socket is wss or the TLS proxy's header
says so), or one of CSRF_TRUSTED_ORIGINS; the Host must itself be an allowed host. Refused
handshakes get HTTP 403 before any consumer runs.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

DEFAULT_PORTS = {"http": 80, "https": 443}


def _header(scope: dict, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin1").strip()
    return ""


def normalize_origin(origin: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin or URL, default ports filled in; None if malformed."""
    try:
        parts = urlsplit(origin)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or DEFAULT_PORTS[scheme]


def _request_scheme(scope: dict) -> str:
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        name = proxy[0].removeprefix("HTTP_").lower().replace("_", "-").encode()
        if _header(scope, name).lower() == proxy[1]:
            return "https"
    return "https" if scope.get("scheme") in ("wss", "https") else "http"


def origin_allowed(scope: dict) -> bool:
    """True when the handshake's Origin is the portal's own origin (scheme, host and port)."""
    host = _header(scope, b"host")
    origin = normalize_origin(_header(scope, b"origin"))
    if not host or origin is None:
        return False
    domain, _port = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return False
    own = normalize_origin(f"{_request_scheme(scope)}://{host}")
    trusted = {normalize_origin(o) for o in settings.CSRF_TRUSTED_ORIGINS}
    return origin == own or origin in trusted


class SameOriginValidator:
    """ASGI middleware: refuse a websocket handshake whose Origin is not the portal's own."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and not origin_allowed(scope):
            denier = WebsocketDenier()
            return await denier(scope, receive, send)
        return await self.application(scope, receive, send)
