"""The watcher: stream ResourceClaims, Pods and Events of tenant namespaces into portal state.

Run `python -m controller.watch` (one process; restartable: it relists on start). Each resource
has a thread that LISTs once, then WATCHes from the last resourceVersion it saw, resuming there
after a dropped connection and relisting only on `410 Gone`. A flusher writes, per project and
DeviceClass, the claims allocated/pending and a pending reason (the quota page reads these through
`portal.orders.lifecycle.record_slice_usage`, which writes only on change), and each project's pod
phases to Redis (`tranche:pods:<project_id>`, a hash pod -> JSON {phase, reason}).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from controller.apply import http

log = logging.getLogger("controller.watch")

RESOURCES = {
    "claims": "/apis/resource.k8s.io/v1/resourceclaims",
    "pods": "/api/v1/pods",
    "events": "/api/v1/events",
}
WATCH_SECONDS = 120
PROJECT_REFRESH_SECONDS = 10.0
POD_KEY_TTL = 3600


class GoneError(Exception):
    """The resourceVersion is too old (410): relist."""


@dataclass
class ClusterState:
    """What the watcher knows about tenant namespaces, keyed by (namespace, name)."""

    claims: dict[tuple[str, str], tuple[str, bool]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    events: dict[str, deque] = field(default_factory=lambda: defaultdict(lambda: deque(maxlen=20)))
    dirty: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def apply(self, resource: str, kind: str, obj: dict[str, Any]) -> None:
        """Fold one watch event (ADDED/MODIFIED/DELETED) into the state."""
        meta = obj.get("metadata", {})
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        with self.lock:
            self.dirty.add(ns)
            if resource == "claims":
                if kind == "DELETED":
                    self.claims.pop((ns, name), None)
                else:
                    self.claims[(ns, name)] = (claim_class(obj), claim_allocated(obj))
            elif resource == "pods":
                if kind == "DELETED":
                    self.pods.pop((ns, name), None)
                else:
                    self.pods[(ns, name)] = pod_summary(obj)
            elif obj.get("type") == "Warning" and kind != "DELETED":
                self.events[ns].append(obj.get("message", ""))

    def replace(
        self, resource: str, items: list[dict[str, Any]], keep_ns: Callable[[str], bool]
    ) -> None:
        """A fresh LIST replaces everything known about `resource`."""
        with self.lock:
            if resource == "claims":
                self.dirty |= {ns for ns, _ in self.claims}
                self.claims.clear()
            elif resource == "pods":
                self.dirty |= {ns for ns, _ in self.pods}
                self.pods.clear()
        for obj in items:
            if keep_ns(obj.get("metadata", {}).get("namespace", "")):
                self.apply(resource, "ADDED", obj)

    def usage(self, ns: str) -> dict[str, tuple[int, int, str]]:
        """Per class: (allocated claims, pending slices, why they wait)."""
        with self.lock:
            allocated: dict[str, int] = defaultdict(int)
            pending: dict[str, int] = defaultdict(int)
            reasons: dict[str, str] = {}
            for (cns, _), (cls, is_allocated) in self.claims.items():
                if cns == ns and cls:
                    (allocated if is_allocated else pending)[cls] += 1
            for (pns, _), pod in self.pods.items():
                if pns != ns or pod["phase"] != "Pending":
                    continue
                for cls in pod["unclaimed_templates"]:
                    pending[cls] += 1
                for cls in pod["classes"]:
                    reasons.setdefault(cls, pod["reason"])
            for message in reversed(self.events.get(ns, ())):
                for cls in set(pending) | set(allocated):
                    if cls in message and cls not in reasons:
                        reasons[cls] = message
            classes = set(allocated) | set(pending)
            return {
                c: (allocated[c], pending[c], reasons.get(c, "") if pending[c] else "")
                for c in classes
            }

    def pod_phases(self, ns: str) -> dict[str, dict[str, str]]:
        with self.lock:
            return {
                name: {"phase": p["phase"], "reason": p["reason"]}
                for (pns, name), p in self.pods.items()
                if pns == ns
            }


def claim_class(claim: dict[str, Any]) -> str:
    requests = claim.get("spec", {}).get("devices", {}).get("requests", [])
    exactly = requests[0].get("exactly", {}) if requests else {}
    return exactly.get("deviceClassName", "")


def claim_allocated(claim: dict[str, Any]) -> bool:
    return bool(claim.get("status", {}).get("allocation"))


def pod_summary(pod: dict[str, Any]) -> dict[str, Any]:
    """Phase, why it is pending, and which template classes it still waits a claim for."""
    status = pod.get("status", {})
    reason = ""
    for cond in status.get("conditions", []):
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            reason = cond.get("message") or cond.get("reason", "")
    for cs in status.get("containerStatuses", []):
        waiting = cs.get("state", {}).get("waiting")
        if waiting and not reason:
            reason = f"{waiting.get('reason', '')}: {waiting.get('message', '')}".strip(": ")
    made = {
        s.get("name") for s in status.get("resourceClaimStatuses", []) if s.get("resourceClaimName")
    }
    templates = [
        rc.get("resourceClaimTemplateName", "")
        for rc in pod.get("spec", {}).get("resourceClaims", [])
        if rc.get("resourceClaimTemplateName")
    ]
    unclaimed = [
        rc["resourceClaimTemplateName"]
        for rc in pod.get("spec", {}).get("resourceClaims", [])
        if rc.get("resourceClaimTemplateName") and rc.get("name") not in made
    ]
    return {
        "phase": status.get("phase", "Pending"),
        "reason": reason,
        "classes": templates,
        "unclaimed_templates": unclaimed,
    }


def _stream_lines(resp: urllib3.HTTPResponse) -> Iterator[bytes]:
    buf = b""
    for chunk in resp.stream(8192, decode_content=False):
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield line


class Watcher:
    """Threads that keep a ClusterState current and flush it to the portal."""

    def __init__(self, api: client.ApiClient, flush_interval: float = 1.0) -> None:
        self.api = api
        self.flush_interval = flush_interval
        self.state = ClusterState()
        self.stop = threading.Event()
        self.resource_versions: dict[str, str] = {}
        self.relists: dict[str, int] = defaultdict(int)
        self._projects: dict[str, int] = {}
        self._projects_at = 0.0
        self._streams: set[urllib3.HTTPResponse] = set()
        self._streams_lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    # -- tenant namespaces (from the database, the truth) ---------------------------------------
    def projects(self) -> dict[str, int]:
        if time.monotonic() - self._projects_at > PROJECT_REFRESH_SECONDS:
            from portal.tenants.models import Project

            self._projects = dict(Project.objects.values_list("namespace", "pk"))
            self._projects_at = time.monotonic()
        return self._projects

    def is_tenant(self, ns: str) -> bool:
        return ns in self.projects()

    # -- list and watch -------------------------------------------------------------------------
    def _get(
        self, path: str, query: list[tuple[str, Any]], stream: bool = False
    ) -> urllib3.HTTPResponse:
        resp = http(
            self.api,
            "GET",
            path,
            query,
            headers={"Accept": "application/json"},
            timeout=(5, WATCH_SECONDS + 30) if stream else (5, 60),
        )
        return resp.response

    def relist(self, resource: str) -> None:
        self.relists[resource] += 1
        body = json.loads(self._get(RESOURCES[resource], []).data)
        self.state.replace(resource, body.get("items", []), self.is_tenant)
        self.resource_versions[resource] = body["metadata"]["resourceVersion"]

    def watch_once(self, resource: str) -> None:
        """One watch request from the last resourceVersion; returns when the server ends it."""
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", self.resource_versions[resource]),
            ("timeoutSeconds", WATCH_SECONDS),
        ]
        resp = self._get(RESOURCES[resource], query, stream=True)
        with self._streams_lock:
            self._streams.add(resp)
        try:
            for line in _stream_lines(resp):
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object", {})
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise GoneError(obj.get("message", "gone"))
                    raise ApiException(status=obj.get("code", 500), reason=obj.get("message"))
                rv = obj.get("metadata", {}).get("resourceVersion")
                if kind != "BOOKMARK" and self.is_tenant(obj["metadata"].get("namespace", "")):
                    self.state.apply(resource, kind, obj)
                if rv:
                    self.resource_versions[resource] = rv
                if self.stop.is_set():
                    return
        finally:
            with self._streams_lock:
                self._streams.discard(resp)
            resp.release_conn()

    def run_resource(self, resource: str) -> None:
        try:
            self._run_resource(resource)
        finally:
            from django.db import connections

            connections.close_all()  # this thread's connection (namespace -> project lookups)

    def _run_resource(self, resource: str) -> None:
        backoff = 0.5
        while not self.stop.is_set():
            try:
                if resource not in self.resource_versions:
                    self.relist(resource)
                self.watch_once(resource)
                backoff = 0.5
            except GoneError:
                log.info("%s: resourceVersion expired (410), relisting", resource)
                self.resource_versions.pop(resource, None)
            except ApiException as exc:
                if exc.status == 410:
                    self.resource_versions.pop(resource, None)
                    continue
                log.warning("%s: %s; retrying in %.1fs", resource, exc, backoff)
                self.stop.wait(backoff)
                backoff = min(backoff * 2, 10)
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                if self.stop.is_set():
                    return  # close() cut the stream
                # keep the resourceVersion: the next watch resumes where this one stopped
                log.warning("%s: connection lost (%s); resuming in %.1fs", resource, exc, backoff)
                self.stop.wait(backoff)
                backoff = min(backoff * 2, 10)

    # -- flush to the portal --------------------------------------------------------------------
    def flush(self) -> int:
        """Write usage of changed namespaces; returns how many namespaces were flushed."""
        from portal.orders import lifecycle
        from portal.orders.models import ProjectUsage

        with self.state.lock:
            dirty, self.state.dirty = self.state.dirty, set()
        projects = self.projects()
        for ns in dirty:
            pid = projects.get(ns)
            if pid is None:
                continue
            usage = self.state.usage(ns)
            known = ProjectUsage.objects.filter(project_id=pid).values_list(
                "product__device_class", flat=True
            )
            for cls in set(usage) | set(known):
                allocated, pending, reason = usage.get(cls, (0, 0, ""))
                try:
                    lifecycle.record_slice_usage(
                        project_id=pid,
                        device_class=cls,
                        allocated=allocated,
                        pending=pending,
                        pending_reason=reason,
                    )
                except ValueError:
                    log.debug("ignoring claims of unknown class %s in %s", cls, ns)
            self._write_pods(pid, self.state.pod_phases(ns))
        return len(dirty)

    def _write_pods(self, project_id: int, phases: dict[str, dict[str, str]]) -> None:
        import redis
        from django.conf import settings

        conn = redis.Redis.from_url(settings.REDIS_URL)
        key = f"tranche:pods:{project_id}"
        pipe = conn.pipeline()
        pipe.delete(key)
        if phases:
            pipe.hset(key, mapping={k: json.dumps(v) for k, v in phases.items()})
            pipe.expire(key, POD_KEY_TTL)
        pipe.execute()

    def run_flusher(self) -> None:
        while not self.stop.is_set():
            try:
                self.flush()
            except Exception:  # the database may be restarting; keep the dirty marks next time
                log.exception("flush failed")
            self.stop.wait(self.flush_interval)
        from django.db import connections

        connections.close_all()  # this thread's connection; Django never closes it otherwise

    def start(self) -> list[threading.Thread]:
        threads = [
            threading.Thread(target=self.run_resource, args=(r,), name=f"watch-{r}", daemon=True)
            for r in RESOURCES
        ]
        threads.append(threading.Thread(target=self.run_flusher, name="flush", daemon=True))
        for t in threads:
            t.start()
        self.threads = threads
        return threads

    def close(self, timeout: float = 10.0) -> None:
        """Stop every thread: cut open watch streams instead of waiting for their timeout.

        Each thread closes its own database connection on the way out."""
        self.stop.set()
        with self._streams_lock:
            streams = list(self._streams)
        for resp in streams:
            resp.shutdown()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self.threads if t.is_alive()]
        if alive:
            log.warning("watcher threads still running after %.0fs: %s", timeout, alive)


def main() -> None:
    """Entry point of `python -m controller.watch`."""
    import django

    django.setup()
    from controller.apply import kube_api_client

    watcher = Watcher(kube_api_client())
    log.info("watching %s", ", ".join(RESOURCES))
    threads = watcher.start()
    try:
        while all(t.is_alive() for t in threads):
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        watcher.close()


if __name__ == "__main__":
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    main()
