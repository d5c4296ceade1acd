"""Django's ASGI handler with the middleware stack and the view run in one thread hop.

Django's own ASGI handler builds the middleware chain in async mode: a sync-only middleware
(WhiteNoise, the portal's request metrics and outage pages) then costs a hop to a thread and
back, each async-capable `MiddlewareMixin` one more per `process_request`/`process_response`,
and the sync view a last one: issue #50 measured that switching at ~18 % of a tenant page's
CPU. Every middleware the portal uses works in sync mode and every page view is sync, so this
handler builds the chain in sync mode and enters it once, in the request's thread-sensitive
thread (the one Django's own handler would run the view in: the same database connection and
`request_started`/`request_finished` semantics). Async code the chain meets (an async view) is
run by Django's own sync path (`async_to_sync`)."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler


class SyncStackHandler(ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)
        self._middleware_chain = sync_to_async(self._middleware_chain, thread_sensitive=True)
