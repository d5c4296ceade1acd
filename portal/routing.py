"""Websocket routes of the portal; each app adds its consumers here."""

from __future__ import annotations

from django.urls import path, re_path

from portal.agents.consumers import AgentConsumer
from portal.core.consumers import LayerPingConsumer
from portal.core.unknown import UnknownPathConsumer
from portal.status.consumers import FleetConsumer, ProjectStatusConsumer

websocket_urlpatterns = [
    path("ws/ping/", LayerPingConsumer.as_asgi()),
    path("ws/agent/", AgentConsumer.as_asgi()),
    path("ws/support/fleet/", FleetConsumer.as_asgi()),
    re_path(r"^ws/projects/(?P<project_id>[0-9]{1,18})/status/$", ProjectStatusConsumer.as_asgi()),
    re_path(r"", UnknownPathConsumer.as_asgi()),  # last: anything else closes with 4404
]
