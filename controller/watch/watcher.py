"""The watcher's threads: one stream per resource, one flusher; none of them dies of a transient
error.

Each stream thread steps its `ResourceStream` forever; a failed step (API down, connection cut,
malformed line) waits with exponential backoff and full jitter, then resumes from the last
resourceVersion. The flusher writes through `UsageWriter` every `flush_interval`; a failed flush
(PostgreSQL restarting) keeps its dirty namespaces and retries with the same backoff. Only
`close()` ends the threads.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from controller import downtime, metering
from controller.watch.state import ClusterState
from controller.watch.stream import RESOURCES, GoneError, ResourceStream
from controller.watch.writer import UsageWriter

log = logging.getLogger("controller.watch")
# how long a started watcher reads the claims' history since its checkpoint (the server sends
# what it kept at once; the request then idles until this ends it)
REPLAY_SECONDS = 2


class Backoff:
    """Exponential backoff with full jitter: the n-th wait is uniform in [0, min(cap, base*2^n)]
    (never below `floor`), so many processes reconnecting to one server do not arrive together."""

    def __init__(self, base: float = 0.5, cap: float = 10.0, floor: float = 0.1) -> None:
        self.base, self.cap, self.floor = base, cap, floor
        self.failures = 0

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.base * 2**self.failures)
        self.failures += 1
        return max(self.floor, random.uniform(0, ceiling))  # noqa: S311 (jitter, not crypto)

    def reset(self) -> None:
        self.failures = 0


class Watcher:
    """Threads that keep a ClusterState current and flush it to the portal."""

    def __init__(self, api: client.ApiClient, flush_interval: float = 1.0) -> None:
        self.api = api
        self.flush_interval = flush_interval
        self.state = ClusterState()
        self.writer = UsageWriter(self.state)
        self.checkpoint = metering.ClaimsCheckpoint()  # saved by the flusher
        self.stop = threading.Event()
        self.streams = {
            name: ResourceStream(
                api,
                name,
                on_list=functools.partial(self._listed, name),
                on_event=functools.partial(self._event, name),
            )
            for name in RESOURCES
        }
        self.threads: list[threading.Thread] = []

    def _listed(self, name: str, items: list[dict[str, Any]]) -> None:
        self.state.replace(name, items)
        if name == "pods":  # a replacement's Running ends its slice's outage (billing SLA)
            for pod in items:
                downtime.observe_pod("ADDED", pod)
        if name == "claims":  # the billing ledger follows claims (controller/metering.py)
            stream = self.streams[name]
            metering.meter_claims_listed(
                items, stream.listed_at, stream.resource_version or "", self.checkpoint
            )

    def replay_claims(self) -> int:
        """Before the first relist: feed the ledger the claims' own history since the last
        version it followed (a claim born and gone while no watcher ran is in it, with its
        managedFields times), while the API server keeps that history. Returns the events fed;
        once the history is compacted (410) the relist marks what it cannot know as estimated."""
        since = metering.claims_checkpoint()
        if not since:
            return 0
        fed = []

        def feed(kind: str, obj: dict[str, Any]) -> None:
            fed.append(kind)
            metering.meter_claim_event(kind, obj, self.checkpoint, replaying=True)

        replay = ResourceStream(self.api, "claims", on_list=lambda items: None, on_event=feed)
        try:
            replay.replay(since, REPLAY_SECONDS)
        except GoneError:
            log.warning("claims history since %s is compacted: relist times are estimated", since)
        except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            log.warning("claims history replay failed (%s): the relist repairs the ledger", exc)
        log.info("replayed %d claim events since resourceVersion %s", len(fed), since)
        return len(fed)

    def _event(self, name: str, kind: str, obj: dict[str, Any]) -> None:
        self.state.apply(name, kind, obj)
        if name == "claims":
            metering.meter_claim_event(kind, obj, self.checkpoint)
        elif name == "pods":
            downtime.observe_pod(kind, obj)

    @property
    def relists(self) -> dict[str, int]:
        return {name: s.relists for name, s in self.streams.items()}

    def run_stream(self, name: str) -> None:
        stream, backoff = self.streams[name], Backoff()
        while not self.stop.is_set():
            try:
                stream.step()
                backoff.reset()
            except GoneError:
                log.info("%s: resourceVersion expired (410), relisting", name)
            except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                if self.stop.is_set():
                    return  # close() cut the stream
                delay = backoff.next_delay()
                log.warning("%s: %s; resuming in %.1fs", name, exc, delay)
                self.stop.wait(delay)
            except Exception:  # a bug must not silently end this resource's stream
                delay = backoff.next_delay()
                log.exception("%s: unexpected error; resuming in %.1fs", name, delay)
                self.stop.wait(delay)

    def run_flusher(self) -> None:
        backoff = Backoff()
        try:
            while not self.stop.is_set():
                try:
                    self.writer.flush()
                    backoff.reset()
                    delay = self.flush_interval
                except Exception as exc:  # the database may be restarting; dirty marks are kept
                    delay = backoff.next_delay()
                    log.warning("flush failed (%s); retrying in %.1fs", exc, delay)
                self.checkpoint.save()
                self.stop.wait(delay)
        finally:
            self.checkpoint.save()  # what the ledger followed up to the stop
            self.writer.close()

    def start(self) -> list[threading.Thread]:
        self.replay_claims()
        threads = [
            threading.Thread(target=self.run_stream, args=(r,), name=f"watch-{r}", daemon=True)
            for r in self.streams
        ]
        threads.append(threading.Thread(target=self.run_flusher, name="flush", daemon=True))
        for t in threads:
            t.start()
        self.threads = threads
        return threads

    def close(self, timeout: float = 10.0) -> None:
        """Stop every thread: cut open watch streams instead of waiting for their timeout."""
        self.stop.set()
        for stream in self.streams.values():
            stream.cut()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self.threads if t.is_alive()]
        if alive:
            log.warning("watcher threads still running after %.0fs: %s", timeout, alive)
