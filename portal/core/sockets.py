"""Websocket consumer mixins: `DirectDispatch`, `SessionBound` (closed on logout) and
`NoClientFrames` (send-only sockets answer a client frame with one error, never a traceback).

`DirectDispatch` hands each message to its handler directly.

Channels' `AsyncConsumer.dispatch` (4.2+) first awaits `aclose_old_connections()`, which runs
Django's `close_old_connections` through `sync_to_async`: a hop to the one thread that also runs
every page view, for *every* message a socket handles. A live page with 200 viewers at 10 agent
frames/s made that 2,000 hops a second, serialised with the page views, and 28 % of the event
loop's time went to scheduling them (py-spy). Our consumers reach the database only
through `database_sync_to_async`, which closes stale connections itself before and after each
call in that thread, so the per-message hop guards nothing here and is skipped.
"""

from __future__ import annotations

import json
import logging

from channels.consumer import get_handler_name

from portal.core.groups import session_group
from portal.core.ratelimit import RateLimitedLog


class DirectDispatch:
    """Mixin placed before the Channels consumer class."""

    async def dispatch(self, message: dict) -> None:
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)


CLOSE_SESSION_ENDED = 4401  # the browser session behind this socket logged out
_frame_log = RateLimitedLog(logging.getLogger("portal.sockets"), burst=10, period=60.0)


def session_group_of(scope: dict) -> str | None:
    """The group of the browser session behind a socket (None without a saved session)."""
    session = scope.get("session")
    key = getattr(session, "session_key", None)
    return session_group(key) if key else None


class SessionBound:
    """Mixin: the socket ends (4401) when the session it was opened with logs out.

    `portal.core.signals` sends `session.ended` to the session's group on logout; a socket is
    authorised by its session on connect only, so without this it outlived the logout."""

    session_group: str | None = None

    async def join_session(self) -> None:
        self.session_group = session_group_of(self.scope)
        if self.session_group:
            await self.channel_layer.group_add(self.session_group, self.channel_name)

    async def leave_session(self) -> None:
        if self.session_group:
            group, self.session_group = self.session_group, None
            await self.channel_layer.group_discard(group, self.channel_name)

    async def session_ended(self, event: dict) -> None:
        await self.leave_session()
        await self.close(code=CLOSE_SESSION_ENDED)


class NoClientFrames:
    """Mixin for sockets that only send: a frame from the client gets one error answer and at
    most 10 log lines a minute (all such sockets together), never a traceback or a close.

    Channels' JSON consumer decoded every frame and raised on anything that was not JSON: a
    traceback of ~52 lines per frame, unbounded."""

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        size = len(text_data or "") + len(bytes_data or b"")
        _frame_log.warning(
            "client frames", "%s: ignored a %d-byte frame from the client", self.scope["path"], size
        )
        await self.send(
            text_data=json.dumps(
                {
                    "type": "error",
                    "error": "This socket only sends updates; messages to it are ignored. "
                    "Reload the page if it stopped updating.",
                }
            )
        )
