"""Websocket routes of the portal; each app adds its consumers here."""

from __future__ import annotations

from django.urls import path

from portal.agents.consumers import AgentConsumer
from portal.core.consumers import LayerPingConsumer

websocket_urlpatterns = [
    path("ws/ping/", LayerPingConsumer.as_asgi()),
    path("ws/agent/", AgentConsumer.as_asgi()),
]
