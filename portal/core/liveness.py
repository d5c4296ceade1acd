"""`GET /healthz` answered at the ASGI door: no Django, thread hop, session or database.

A liveness probe says only that the process serves; routing it through Django's middleware cost
a sync thread, a session lookup and the URL resolver per probe (issue #35: 207 requests/s from
one process). `AnswerLiveness` wraps the HTTP application in `portal/asgi.py` and answers the
path itself, so a portal whose thread pool or database pool is exhausted still says it is alive
(readiness, `/readyz`, is where dependencies are judged). Every other request passes unchanged.
"""

from __future__ import annotations

from typing import Any

PATH = "/healthz"
BODY = b'{"status": "ok"}'
_HEADERS = [
    (b"content-type", b"application/json"),
    (b"cache-control", b"max-age=0, no-cache, no-store, must-revalidate, private"),
    (b"x-content-type-options", b"nosniff"),
]


class AnswerLiveness:
    """ASGI middleware: GET /healthz -> 200 `{"status": "ok"}`; another method there -> 405."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> Any:
        if scope.get("type") != "http" or scope.get("path") != PATH:
            return await self.app(scope, receive, send)
        if scope.get("method") == "GET":
            status, body, headers = 200, BODY, _HEADERS
        else:
            status, body, headers = 405, b"", [*_HEADERS, (b"allow", b"GET")]
        length = [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers + length})
        await send({"type": "http.response.body", "body": body})
        return None
