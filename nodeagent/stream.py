"""Status stream to the portal's /ws/agent/: deltas at ~1 Hz, reconnect with backoff and jitter,
and a bounded buffer while disconnected (oldest dropped first, counted and reported).

Each message carries only pods that changed since the previous message, plus `removed`; the
first message after (re)connecting and one every `full_every` seconds are full snapshots, so a
dropped delta can never leave the portal wrong for long.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections import deque
from urllib.parse import urlsplit

from tranche.agent_protocol import Finding, GpuReport, PodReport, RemovedPod, StatusFrame

log = logging.getLogger(__name__)


def origin_of(url: str) -> str:
    """The portal's own origin: the portal's origin check admits it (no browser involved)."""
    parts = urlsplit(url)
    return f"{'https' if parts.scheme == 'wss' else 'http'}://{parts.netloc}"


def backoff_delay(attempt: int, base: float = 0.5, cap: float = 30.0) -> float:
    """Full jitter: uniform in [0, min(cap, base*2^attempt)], so agents do not reconnect in
    lockstep after a portal restart."""
    return random.uniform(0, min(cap, base * 2**attempt))  # noqa: S311  (not security)


class StatusStream:
    """Builds delta messages (`offer`) and ships them (`run`)."""

    def __init__(
        self, url: str, node: str, token: str, buffer_size: int = 120, full_every: float = 30.0
    ) -> None:
        self.url, self.node, self.token = url, node, token
        self.buffer: deque[str] = deque()
        self.buffer_size = buffer_size
        self.full_every = full_every
        self.dropped = 0
        self.seq = 0
        self.acked = 0
        self.rejected: list[str] = []
        self.connected = asyncio.Event()
        self._last: dict[tuple[str, str], dict] = {}
        self._last_full = 0.0
        self._force_full = True
        self._wake = asyncio.Event()

    def offer(
        self,
        gpus: list[GpuReport],
        pods: dict[tuple[str, str], PodReport],
        findings: list[Finding] | None = None,
    ) -> None:
        """Queue one status message (call from the event loop's thread); `findings` are sent
        once, in this message."""
        if len(self.buffer) >= self.buffer_size:
            self.buffer.popleft()  # oldest first: the newest state matters most
            self.dropped += 1
            self._force_full = True  # the dropped delta may have held a change
        now = time.time()
        full = self._force_full or now - self._last_full >= self.full_every
        changed = [p for k, p in pods.items() if full or self._last.get(k) != p]
        removed = [
            RemovedPod(namespace=ns, pod=pod) for (ns, pod) in self._last if (ns, pod) not in pods
        ]
        self._last = dict(pods)
        if full:
            self._last_full, self._force_full = now, False
        self.seq += 1
        msg = StatusFrame(
            type="status",
            node=self.node,
            seq=self.seq,
            ts=now,
            full=full,
            dropped=self.dropped,
            gpus=gpus,
            pods=changed,
            removed=removed,
            findings=list(findings or []),
        )
        self.buffer.append(json.dumps(msg, separators=(",", ":")))
        self._wake.set()

    async def _receive(self, ws) -> None:
        async for reply in ws:
            data = json.loads(reply)
            if "ack" in data:
                self.acked = max(self.acked, int(data["ack"]))
            else:
                self.rejected.append(data.get("error", reply))
                log.error("portal rejected message %s: %s", data.get("seq"), data.get("error"))

    async def _send_loop(self, ws) -> None:
        while True:
            while self.buffer:
                text = self.buffer[0]
                await ws.send(text)
                self.buffer.popleft()  # only after the send succeeded
            self._wake.clear()
            await self._wake.wait()

    async def run(self, stop: asyncio.Event) -> None:
        """Connect, ship, reconnect until `stop` is set."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus, WebSocketException

        attempt = 0
        headers = {"Authorization": f"Bearer {self.token}", "X-Tranche-Node": self.node}
        while not stop.is_set():
            started = time.monotonic()
            try:
                async with connect(
                    self.url, origin=origin_of(self.url), additional_headers=headers,
                    open_timeout=5, max_size=2**20,
                ) as ws:  # fmt: skip
                    log.info("connected to portal %s as node %s", self.url, self.node)
                    self.connected.set()
                    self._force_full = True
                    tasks = [
                        asyncio.create_task(self._send_loop(ws)),
                        asyncio.create_task(self._receive(ws)),
                        asyncio.create_task(stop.wait()),
                    ]
                    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                    for t in pending:
                        t.cancel()
                    for t in done:
                        if not t.cancelled() and t.exception():
                            raise t.exception()
            except InvalidStatus as exc:
                code = exc.response.status_code
                if code in (401, 403):
                    log.error("portal refused node %s: HTTP %s: check its token", self.node, code)
                else:  # 5xx: the portal or its database is down; the token is not the problem
                    log.warning("portal unavailable to node %s: HTTP %s; retrying", self.node, code)
            except (OSError, TimeoutError, WebSocketException) as exc:
                log.warning("portal connection lost: %s", exc)
            finally:
                self.connected.clear()
            if stop.is_set():
                break
            if time.monotonic() - started > 10:
                attempt = 0  # a connection that held resets the backoff
            delay = backoff_delay(attempt)
            attempt += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)
