"""The websocket route of last resort: an unknown path (or an id too long for the routes) is
accepted and closed at once with code 4404, never an HTTP 500 with a traceback."""

from __future__ import annotations

from channels.generic.websocket import AsyncWebsocketConsumer

CLOSE_NOT_FOUND = 4404


class UnknownPathConsumer(AsyncWebsocketConsumer):
    # No channel layer: nothing is ever sent to this socket, so it opens no Redis channel.
    channel_layer_alias = "none"

    async def connect(self) -> None:
        # Accept first: a refused handshake reaches a browser as a bare 1006, and the page could
        # not tell "no such socket" from "network down".
        await self.accept()
        await self.close(code=CLOSE_NOT_FOUND)
