"""Status stream to the portal's /ws/agent/: one frame per sample (~1 Hz), reconnect with
backoff and jitter, and one bounded buffer of what the portal has not acknowledged.

A frame carries every pod entry (report or removal) not acknowledged yet: pods that changed,
pods gone, and entries the portal refused for now (`StatusAck.refused` with `retry`) or lost
with a frame (an error answer, an outage, a dropped connection). The same buffer covers a portal
or Redis outage and the portal's per-entry refusals: newest entry per pod kept, removals
included, resent until acknowledged or superseded. The first sample after (re)connecting and
one every `full_every` seconds put every pod again, so the portal can never stay wrong for long.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections import deque
from collections.abc import Callable
from urllib.parse import urlsplit

from tranche.agent_protocol import (
    MAX_ITEMS,
    Finding,
    GpuReport,
    PodReport,
    RemovedPod,
    StatusFrame,
)

log = logging.getLogger(__name__)
MAX_INFLIGHT = 64  # frames sent and not answered yet, per connection


def origin_of(url: str) -> str:
    """The portal's own origin: the portal's origin check admits it (no browser involved)."""
    parts = urlsplit(url)
    return f"{'https' if parts.scheme == 'wss' else 'http'}://{parts.netloc}"


def backoff_delay(attempt: int, base: float = 0.5, cap: float = 30.0) -> float:
    """Full jitter: uniform in [0, min(cap, base*2^attempt)], so agents do not reconnect in
    lockstep after a portal restart."""
    return random.uniform(0, min(cap, base * 2**attempt))  # noqa: S311  (not security)


Key = tuple[str, str]  # (namespace, pod)


class StatusStream:
    """Keeps what the portal has not acknowledged (`offer`) and ships it (`run`).

    `_pending` holds, per pod, the newest entry not yet acknowledged: its report, or None for
    its removal. Every frame carries all of them (up to MAX_ITEMS of each); an entry leaves
    when the portal acknowledges the frame without refusing it, or refuses it for good, and
    only if no newer entry for that pod was offered meanwhile. Entries refused with `retry`
    (the watcher has not bound the pod yet), frames answered with an error and frames lost
    with a connection stay and go again, so no change, a removal included, is ever lost; the
    buffer is bounded (`max_pending` pods: the oldest report dropped first and counted, put back
    by the next full sample; removals kept).
    """

    def __init__(
        self, url: str, node: str, token: str, max_pending: int = 2048, full_every: float = 30.0
    ) -> None:
        self.url, self.node, self.token = url, node, token
        self.max_pending = max_pending
        self.full_every = full_every
        self.dropped = 0
        self.seq = 0
        self.acked = 0
        self.rejected: list[str] = []  # frames the portal refused whole (their reasons)
        self.refusals: dict[Key, str] = {}  # pods refused with retry now, and why
        self.connected = asyncio.Event()
        self._pending: dict[Key, PodReport | None] = {}
        self._version: dict[Key, int] = {}
        self._versions = 0
        self._inflight: dict[int, dict[Key, int]] = {}
        self._findings: deque[Finding] = deque(maxlen=MAX_ITEMS)
        self._findings_sent: dict[int, list[Finding]] = {}
        self._gpus: list[GpuReport] = []
        self._last: dict[Key, PodReport] = {}
        self._last_full = 0.0
        self._force_full = True
        self._full = False
        self._due = False
        self._wake = asyncio.Event()
        # (GPU UUID, when): support marked the GPU back in service (`StatusAck.in_service`);
        # the agent points it at its health monitor (called on the event loop's thread).
        self.on_in_service: Callable[[str, float], object] = lambda gpu, at: None

    @property
    def pending(self) -> dict[Key, PodReport | None]:
        """The entries not acknowledged yet (a copy)."""
        return dict(self._pending)

    def _put(self, key: Key, entry: PodReport | None) -> None:
        if key not in self._pending and len(self._pending) >= self.max_pending:
            # the oldest report goes (the next full sample puts it back); a removal only when
            # nothing else is left, as nothing would send it again
            reports = (k for k, entry in self._pending.items() if entry is not None)
            oldest = next(reports, next(iter(self._pending)))
            del self._pending[oldest]
            self._version.pop(oldest, None)
            self.dropped += 1
            self._force_full = True  # the dropped change is re-offered by the next full offer
        self._pending.pop(key, None)  # re-inserted last: the order is the order of changes
        self._pending[key] = entry
        self._versions += 1
        self._version[key] = self._versions

    def offer(
        self,
        gpus: list[GpuReport],
        pods: dict[Key, PodReport],
        findings: list[Finding] | None = None,
    ) -> None:
        """Take one sample (call from the event loop's thread): pods that changed since the
        last sample and pods gone since become pending; `findings` are sent until acknowledged.
        The first sample after (re)connecting and one every `full_every` seconds put every pod
        again, so the portal can never stay wrong for long."""
        now = time.time()
        full = self._force_full or now - self._last_full >= self.full_every
        for key, pod in pods.items():
            if full or self._last.get(key) != pod:
                self._put(key, pod)
        for key in self._last:
            if key not in pods:
                self._put(key, None)
        self._last = dict(pods)
        if full:
            self._last_full, self._force_full = now, False
        self._full = full
        self._gpus = gpus
        self._findings.extend(findings or [])
        self._due = True
        self._wake.set()

    def next_frame(self) -> str:
        """The next frame to send: every pending entry (up to MAX_ITEMS pods and removals),
        remembered under its seq until the portal answers."""
        self.seq += 1
        pods, removed, sent = [], [], {}
        for key, entry in self._pending.items():
            bucket = removed if entry is None else pods
            if len(bucket) >= MAX_ITEMS:
                continue
            bucket.append(RemovedPod(namespace=key[0], pod=key[1]) if entry is None else entry)
            sent[key] = self._version[key]
        findings = list(self._findings)
        self._inflight[self.seq] = sent
        self._findings_sent[self.seq] = findings
        while len(self._inflight) > MAX_INFLIGHT:  # answers never came (a lost connection)
            self._forget(next(iter(self._inflight)))
        msg = StatusFrame(
            type="status",
            node=self.node,
            seq=self.seq,
            ts=time.time(),
            full=self._full and len(sent) == len(self._pending),
            dropped=self.dropped,
            gpus=self._gpus,
            pods=pods,
            removed=removed,
        )
        if findings:
            msg["findings"] = findings
        self._full = False
        return json.dumps(msg, separators=(",", ":"))

    def _forget(self, seq: int) -> None:
        """A frame whose answer will not come: its entries stay pending and go again."""
        self._inflight.pop(seq, None)
        self._findings_sent.pop(seq, None)

    def on_reply(self, reply: dict) -> None:
        """Apply the portal's answer to one frame (a `StatusAck`, or {"error", "seq"})."""
        if "ack" not in reply:
            self.rejected.append(str(reply.get("error", reply)))
            log.error("portal refused message %s: %s", reply.get("seq"), reply.get("error"))
            seq = reply.get("seq")
            if isinstance(seq, int):
                self._forget(seq)  # nothing of it was stored: its entries go again
            return
        seq = int(reply["ack"])
        self.acked = max(self.acked, seq)
        for mark in reply.get("in_service", []):
            self.on_in_service(str(mark["gpu"]), float(mark["at"]))
        sent = self._inflight.pop(seq, {})
        for finding in self._findings_sent.pop(seq, []):
            with contextlib.suppress(ValueError):
                self._findings.remove(finding)
        refused = {(r["namespace"], r["pod"]): r for r in reply.get("refused", [])}
        for key, version in sent.items():
            why = refused.get(key)
            if why is not None and why.get("retry"):
                if self.refusals.get(key) != why["reason"]:
                    log.warning("portal will take %s/%s later: %s", *key, why["reason"])
                self.refusals[key] = why["reason"]
                continue
            if why is not None:
                log.error("portal refused %s/%s for good: %s", *key, why["reason"])
            self.refusals.pop(key, None)
            if self._version.get(key) == version:  # nothing newer offered meanwhile
                del self._pending[key]
                del self._version[key]

    async def _receive(self, ws) -> None:
        async for reply in ws:
            self.on_reply(json.loads(reply))

    async def _send_loop(self, ws) -> None:
        while True:
            self._wake.clear()
            if self._due:
                self._due = False
                await ws.send(self.next_frame())
            else:
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
                    self._force_full = True  # the next sample puts every pod again
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
                for seq in list(self._inflight):  # unanswered: their entries go again
                    self._forget(seq)
            if stop.is_set():
                break
            if time.monotonic() - started > 10:
                attempt = 0  # a connection that held resets the backoff
            delay = backoff_delay(attempt)
            attempt += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)
