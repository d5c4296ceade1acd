"""When a request reached the portal: stamped on the ASGI scope before Django or any thread runs.

A deadline a tenant is promised (pre-flight's call deadline) counts from the request's arrival,
not from when its view got a thread: under load a request can wait seconds for the server's
threads and the database pool before its view starts (50 parallel calls answered after
11.3 s for a 10 s deadline when it was counted from the view's start). `StampArrival` wraps the
HTTP application in `portal/asgi.py`; `arrived_at(request)` reads the stamp, or "now" where no
ASGI server stamped it (Django's test client).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

SCOPE_KEY = "tranche.arrived"


@dataclass(frozen=True)
class Arrival:
    """The same instant on both clocks: monotonic for this process, wall time for a worker."""

    monotonic: float
    wall: float

    @classmethod
    def now(cls) -> Arrival:
        return cls(time.monotonic(), time.time())


class StampArrival:
    """ASGI middleware: every HTTP scope gets its arrival; nothing else changes."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> Any:
        if scope.get("type") == "http" and SCOPE_KEY not in scope:
            scope = {**scope, SCOPE_KEY: Arrival.now()}
        return await self.app(scope, receive, send)


def arrived_at(request: Any) -> Arrival:
    """The request's stamped arrival, else now."""
    stamp = (getattr(request, "scope", None) or {}).get(SCOPE_KEY)
    return stamp if isinstance(stamp, Arrival) else Arrival.now()
