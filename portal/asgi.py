"""ASGI entry point: HTTP goes to Django, websockets to the Channels router.

`GET /healthz` is answered before Django (`portal.core.liveness`: no thread, session or
database); other HTTP requests are stamped with their arrival first (`portal.core.arrival`:
deadlines count from there), then run by `SyncStackHandler`: the middleware and the view in one
thread hop. Sockets pass the same-origin check (scheme, host and port:
`portal.core.origin`) and session authentication before any consumer runs; consumers then
authorise on connect and per event. The ingest role's process (`portal.serve --role ingest`)
answers only the agents' socket and the probes (`portal.core.ingest_only`).
"""

from __future__ import annotations

import os
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup(set_prefix=False)  # as django.core.asgi.get_asgi_application does

from portal.core.sync_stack import SyncStackHandler  # noqa: E402  (needs Django set up first)

django_asgi_app = SyncStackHandler()  # the middleware chain and view in one thread hop

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from portal.core.arrival import StampArrival  # noqa: E402
from portal.core.ingest_only import IngestOnly  # noqa: E402
from portal.core.liveness import AnswerLiveness  # noqa: E402
from portal.core.origin import SameOriginValidator  # noqa: E402
from portal.routing import websocket_urlpatterns  # noqa: E402


def build_application(role: str) -> Any:
    """The portal's application; the ingest role's answers only the agents and probes."""
    app = ProtocolTypeRouter(
        {
            "http": AnswerLiveness(StampArrival(django_asgi_app)),  # deadlines count from here
            "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        }
    )
    return IngestOnly(app) if role == "ingest" else app


application = build_application(os.environ.get("TRANCHE_PORTAL_ROLE", "pages"))
