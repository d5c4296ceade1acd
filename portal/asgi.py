"""ASGI entry point: HTTP goes to Django, websockets to the Channels router.

`GET /healthz` is answered before Django (`portal.core.liveness`: no thread, session or
database); other HTTP requests are stamped with their arrival first (`portal.core.arrival`:
deadlines count from there), then run by `SyncStackHandler`: the middleware and the view in one
thread hop. Sockets pass the same-origin check (scheme, host and port:
`portal.core.origin`) and session authentication before any consumer runs; consumers then
authorise on connect and per event.
"""

from __future__ import annotations

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup(set_prefix=False)  # as django.core.asgi.get_asgi_application does

from portal.core.sync_stack import SyncStackHandler  # noqa: E402  (needs Django set up first)

django_asgi_app = SyncStackHandler()  # the middleware chain and view in one thread hop

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from portal.core.arrival import StampArrival  # noqa: E402
from portal.core.liveness import AnswerLiveness  # noqa: E402
from portal.core.origin import SameOriginValidator  # noqa: E402
from portal.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": AnswerLiveness(StampArrival(django_asgi_app)),  # deadlines count from here
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
