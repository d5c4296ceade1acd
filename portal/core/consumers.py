"""A websocket that proves the Channels layer works end to end.

The client sends {"ping": <token>}; the consumer sends it through the Redis channel layer to its
own channel and answers {"pong": <token>, "via": "channel-layer"} only when the message came back,
so a broken layer shows up as a missing answer rather than a fake success.

Logged-in sessions only (4401 otherwise: anonymous sockets echoed through Redis without limit),
at most `PINGS_PER_SECOND` pings a second per socket (more get an error, not an echo), and
closed when the session logs out.
"""

from __future__ import annotations

import json
import time

from channels.generic.websocket import AsyncWebsocketConsumer

from portal.core.sockets import CLOSE_SESSION_ENDED, SessionBound

MAX_TOKEN_LENGTH = 200
PINGS_PER_SECOND = 5


class LayerPingConsumer(SessionBound, AsyncWebsocketConsumer):
    allowed = False
    window_start: float = 0.0
    pings: int = 0

    async def connect(self) -> None:
        await self.accept()
        user = self.scope.get("user")
        if not getattr(user, "is_authenticated", False):
            await self.close(code=CLOSE_SESSION_ENDED)
            return
        self.allowed = True
        await self.join_session()

    async def disconnect(self, code: int) -> None:
        await self.leave_session()

    def _over_rate(self) -> bool:
        now = time.monotonic()
        if now - self.window_start >= 1.0:
            self.window_start, self.pings = now, 0
        self.pings += 1
        return self.pings > PINGS_PER_SECOND

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if not self.allowed:  # refused on connect; nothing to answer
            return
        if self._over_rate():
            await self.send(json.dumps({"error": f"at most {PINGS_PER_SECOND} pings a second"}))
            return
        try:
            token = json.loads(text_data or "")["ping"]
        except (ValueError, KeyError, TypeError, RecursionError):
            await self.send(json.dumps({"error": 'expected a JSON object like {"ping": "abc"}'}))
            return
        if not isinstance(token, str) or len(token) > MAX_TOKEN_LENGTH:
            await self.send(json.dumps({"error": f"ping must be a string ≤ {MAX_TOKEN_LENGTH}"}))
            return
        await self.channel_layer.send(self.channel_name, {"type": "layer.pong", "token": token})

    async def layer_pong(self, event: dict) -> None:
        await self.send(json.dumps({"pong": event["token"], "via": "channel-layer"}))
