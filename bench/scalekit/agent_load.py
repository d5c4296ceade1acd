"""The fleet reporting while pages are measured: node agents as websockets in a background thread.

`AgentLoad` opens one /ws/agent/ socket per node and sends, every 1/rate_hz s (the real agent's
delta period is ~1 s), one status frame listing every pod of that node with new figures (the
worst case of the agent's deltas: every pod changed). Send times are fixed in advance, so a
portal that falls behind shows as a growing ack lag, not as a slower fleet. The portal ingests
these frames in the same process, and on the same sync thread, as it serves page views, so
`measure_pages` inside `with AgentLoad(...)` measures pages "with the fleet busy".

Each node needs its token and pods the watcher bound to it (see `pages.measure_fanout`);
`fleet_rows.seed_fleet` makes both for bench/load.py.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .pages import percentile

MIB = 1024 * 1024
Pod = tuple[str, str, str]  # (namespace, pod name, uid)


def node_frame(node: str, seq: int, pods: list[Pod]) -> str:
    items = [
        {"namespace": ns, "pod": name, "uid": uid, "gpu_uuid": f"GPU-{node}-{k % 8}",
         "memory_limit_bytes": 8192 * MIB, "memory_used_bytes": (1024 + seq % 4096) * MIB,
         "rejected_allocations": 0, "compute_target_percent": 25,
         "compute_used_percent": float(20 + seq % 5), "throttled_seconds": 0.0, "processes": 1}
        for k, (ns, name, uid) in enumerate(pods)
    ]  # fmt: skip
    return json.dumps(
        {"type": "status", "node": node, "seq": seq, "ts": time.time(), "full": False,
         "dropped": 0, "gpus": [], "pods": items, "removed": []}
    )  # fmt: skip


@dataclass
class AgentLoad:
    """`with AgentLoad(url, {node: (token, pods)}, rate_hz=1.0) as load:` ...; `load.summary()`."""

    base_url: str
    nodes: dict[str, tuple[str, list[Pod]]]
    rate_hz: float = 1.0
    sent: int = 0
    lags: list[float] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _ready: threading.Event = field(default_factory=threading.Event)
    _failed: list[BaseException] = field(default_factory=list)
    _thread: threading.Thread | None = None
    _started: asyncio.Event | None = None
    _began: float = 0.0
    _ended: float = 0.0

    async def _agent(self, i: int, node: str, token: str, pods: list[Pod]) -> None:
        import websockets

        parts = urlsplit(self.base_url)
        url = f"{'wss' if parts.scheme == 'https' else 'ws'}://{parts.netloc}/ws/agent/"
        headers = {"Authorization": f"Bearer {token}", "X-Tranche-Node": node,
                   "Origin": f"{parts.scheme}://{parts.netloc}"}  # fmt: skip
        sent_at: dict[int, float] = {}
        async with websockets.connect(url, additional_headers=headers, open_timeout=60) as ws:

            async def answers() -> None:
                async for raw in ws:
                    answer = json.loads(raw)
                    if "ack" in answer and answer["ack"] in sent_at:
                        self.lags.append(time.monotonic() - sent_at.pop(answer["ack"]))
                    elif "error" in answer and len(self.refusals) < 5:
                        self.refusals.append(f"{node}: {answer['error']}")

            reader = asyncio.create_task(answers())
            await self._started.wait()
            period = 1 / self.rate_hz
            seq = 0
            while not self._stop.is_set():
                scheduled = self._began + (i / len(self.nodes) + seq) * period
                await asyncio.sleep(max(0.0, scheduled - time.monotonic()))
                seq += 1
                sent_at[seq] = scheduled  # lag counts from the scheduled send
                await ws.send(node_frame(node, seq, pods))
                self.sent += 1
            await asyncio.sleep(min(5.0, 2 * period))  # acks in flight
            reader.cancel()

    async def _main(self) -> None:
        self._started = asyncio.Event()
        tasks = [
            asyncio.create_task(self._agent(i, node, token, pods))
            for i, (node, (token, pods)) in enumerate(self.nodes.items())
        ]
        await asyncio.sleep(1.0)  # the sockets connect (a failure shows in the results)
        self._began = time.monotonic()
        self._started.set()
        self._ready.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        self._failed.extend(r for r in results if isinstance(r, BaseException))

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        finally:
            self._ready.set()

    def __enter__(self) -> AgentLoad:
        self._thread = threading.Thread(target=self._run, daemon=True, name="agent-load")
        self._thread.start()
        self._ready.wait(120)
        return self

    def __exit__(self, *exc) -> None:
        self._ended = time.monotonic()
        self._stop.set()
        if self._thread:
            self._thread.join(60)

    def summary(self) -> dict:
        seconds = max(1e-3, self._ended - self._began)
        return {
            "nodes": len(self.nodes),
            "pods": sum(len(pods) for _token, pods in self.nodes.values()),
            "frames_per_s_offered": round(len(self.nodes) * self.rate_hz, 1),
            "frames_sent": self.sent,
            "frames_acked": len(self.lags),
            "ack_lag_p50_s": round(percentile(self.lags, 50), 3),
            "ack_lag_p99_s": round(percentile(self.lags, 99), 3),
            "acked_per_s": round(len(self.lags) / seconds, 1),
            "refusals": self.refusals,
            "failed_agents": [repr(e)[:200] for e in self._failed[:3]],
        }
