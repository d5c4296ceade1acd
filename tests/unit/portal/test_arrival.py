"""The request's arrival, stamped on the ASGI scope before Django runs (#28: deadlines count
from there)."""

from __future__ import annotations

import asyncio
import time

from portal.core.arrival import SCOPE_KEY, Arrival, StampArrival, arrived_at


def test_http_scopes_get_their_arrival_and_sockets_do_not() -> None:
    seen: list[dict] = []

    async def app(scope: dict, _receive: object, _send: object) -> None:
        seen.append(scope)

    before = time.monotonic()
    asyncio.run(StampArrival(app)({"type": "http", "path": "/"}, None, None))
    asyncio.run(StampArrival(app)({"type": "websocket", "path": "/ws/"}, None, None))
    stamp = seen[0][SCOPE_KEY]
    assert before <= stamp.monotonic <= time.monotonic()
    assert abs(stamp.wall - time.time()) < 5
    assert SCOPE_KEY not in seen[1]

    class Request:
        scope = seen[0]

    assert arrived_at(Request()) is stamp
    assert isinstance(arrived_at(object()), Arrival)  # no ASGI scope: now
