"""A node agent's real status client (`nodeagent.stream.StatusStream`) running in a thread of
its own, sampling every `period` seconds as the agent does, for tests that need an agent's
buffering and resending against a portal served for real, with the two facts such tests read
and write: the watcher's pod bindings in Redis and the stored rows. Shared by the integration,
cluster and browser tiers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading

from nodeagent.stream import StatusStream

GIB = 1024**3


def bind_pods(client, project_id: int, node: str, *pods: str) -> None:
    """Play the watcher: the cluster runs each pod (uid-<name>) on `node` (`client`: redis)."""
    state = {p: json.dumps({"phase": "Running", "reason": "", "node": node, "uid": f"uid-{p}"})
             for p in pods}  # fmt: skip
    client.hset(f"tranche:pods:{project_id}", mapping=state)


def stored_gib(namespace: str) -> dict[str, int]:
    """pod name -> GiB used, as the portal stored the agent's reports of `namespace`."""
    from portal.agents import selectors

    return {s.pod_name: s.memory_used_bytes // GIB for s in
            selectors.PodSliceStatus.objects.filter(namespace=namespace)}  # fmt: skip


def pod(namespace: str, name: str, used_gib: int = 1, uid: str = "") -> dict:
    """A PodReport of a 8 GiB / 25 % slice using `used_gib`."""
    return {
        "namespace": namespace, "pod": name, "uid": uid or f"uid-{name}", "gpu_uuid": "GPU-1",
        "memory_limit_bytes": 8 * GIB, "memory_used_bytes": used_gib * GIB,
        "rejected_allocations": 0, "compute_target_percent": 25, "compute_used_percent": 10.0,
        "throttled_seconds": 0.0, "processes": 1,
    }  # fmt: skip


class AgentLoop:
    """`pods` is what the agent's collector sees now (replace it whole); `stop()` ends it."""

    def __init__(self, url: str, node: str, token: str, period: float = 0.5) -> None:
        self.stream = StatusStream(url, node, token, full_every=3600)
        self.period = period
        self.pods: dict[tuple[str, str], dict] = {}
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"agent-{node}", daemon=True)
        self._thread.start()
        assert self._ready.wait(10), "the agent loop did not start"

    def set_pods(self, *reports: dict) -> None:
        self.pods = {(p["namespace"], p["pod"]): p for p in reports}

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        self._ready.set()
        shipping = asyncio.create_task(self.stream.run(self._stop))
        while not self._stop.is_set():
            self.stream.offer([], dict(self.pods))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=self.period)
        await shipping

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(15)
