"""The agents' ingest port answers only what the agents and the platform's probes need.

`portal.serve --role ingest` runs the whole portal application on its own port for the node
agents' websockets; without this guard that port also served login, admin and every page, a
second door outside whatever fronts the portal's own (#45). `IngestOnly` passes websockets to
`/ws/agent/` and HTTP to the probes and metrics (`/healthz`, `/readyz`, `/metrics`), and answers
anything else 404 (HTTP) or closes it with 4404 (websocket) before Django or a consumer runs.
"""

from __future__ import annotations

from typing import Any

SOCKET_PATHS = frozenset({"/ws/agent/"})
HTTP_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
NOT_HERE = b"Not found: this port serves only the node agents' ingest.\n"


class IngestOnly:
    """ASGI middleware in front of the ingest role's application."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> Any:
        path = scope.get("path", "")
        if scope["type"] == "websocket" and path not in SOCKET_PATHS:
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 4404})
            return None
        if scope["type"] == "http" and path.rstrip("/") not in HTTP_PATHS:
            await send({"type": "http.response.start", "status": 404,
                        "headers": [(b"content-type", b"text/plain; charset=utf-8")]})  # fmt: skip
            await send({"type": "http.response.body", "body": NOT_HERE})
            return None
        return await self.app(scope, receive, send)
