"""ASGI entry point: HTTP goes to Django, websockets to the Channels router.

`GET /healthz` is answered before Django (`portal.core.liveness`: no thread, session or
database); other HTTP requests are stamped with their arrival first (`portal.core.arrival`:
deadlines count from there). Sockets pass the same-origin check (scheme, host and port:
`portal.core.origin`) and session authentication before any consumer runs; consumers then
authorise on connect and per event.
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django_asgi_app = get_asgi_application()

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
