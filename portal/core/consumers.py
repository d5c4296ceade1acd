"""A websocket that proves the Channels layer works end to end.

The client sends {"ping": <token>}; the consumer sends it through the Redis channel layer to its
own channel and answers {"pong": <token>, "via": "channel-layer"} only when the message came back,
so a broken layer shows up as a missing answer rather than a fake success.
"""

from __future__ import annotations

import json

from channels.generic.websocket import AsyncWebsocketConsumer

MAX_TOKEN_LENGTH = 200


class LayerPingConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        await self.accept()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            token = json.loads(text_data or "")["ping"]
        except (ValueError, KeyError, TypeError):
            await self.send(json.dumps({"error": 'expected a JSON object like {"ping": "abc"}'}))
            return
        if not isinstance(token, str) or len(token) > MAX_TOKEN_LENGTH:
            await self.send(json.dumps({"error": f"ping must be a string ≤ {MAX_TOKEN_LENGTH}"}))
            return
        await self.channel_layer.send(self.channel_name, {"type": "layer.pong", "token": token})

    async def layer_pong(self, event: dict) -> None:
        await self.send(json.dumps({"pong": event["token"], "via": "channel-layer"}))
