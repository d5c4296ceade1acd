"""`DirectDispatch`: websocket consumers that hand each message to its handler directly.

Channels' `AsyncConsumer.dispatch` (4.2+) first awaits `aclose_old_connections()`, which runs
Django's `close_old_connections` through `sync_to_async`: a hop to the one thread that also runs
every page view, for *every* message a socket handles. A live page with 200 viewers at 10 agent
frames/s made that 2,000 hops a second, serialised with the page views, and 28 % of the event
loop's time went to scheduling them (py-spy, issue #18). Our consumers reach the database only
through `database_sync_to_async`, which closes stale connections itself before and after each
call in that thread, so the per-message hop guards nothing here and is skipped.
"""

from __future__ import annotations

from channels.consumer import get_handler_name


class DirectDispatch:
    """Mixin placed before the Channels consumer class."""

    async def dispatch(self, message: dict) -> None:
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)
