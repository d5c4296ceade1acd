"""One resource's event stream from kube-apiserver: LIST once, WATCH from the last
resourceVersion, resume there after a dropped connection, relist only on `410 Gone`.

Why not `kubernetes.watch.Watch`: it hides the open response, so a stopping watcher would wait
for the next event or the server's timeout (up to `WATCH_SECONDS`) instead of cutting the stream
at once, and it deserialises every object into models we would turn back into dicts. What we
keep from it is the protocol: bookmarks, resourceVersion bookkeeping and 410 handling.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from controller.apply import http

RESOURCES = {
    "claims": "/apis/resource.k8s.io/v1/resourceclaims",
    "pods": "/api/v1/pods",
    "events": "/api/v1/events",
    "quotas": "/api/v1/resourcequotas",
}
WATCH_SECONDS = 120


class GoneError(Exception):
    """The resourceVersion is too old (410): relist."""


def stream_lines(resp: urllib3.HTTPResponse) -> Iterator[bytes]:
    """The non-empty lines of a chunked watch response."""
    buf = b""
    for chunk in resp.stream(8192, decode_content=False):
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield line


class ResourceStream:
    """List/watch of one resource, feeding `on_list(items)` and `on_event(kind, obj)`.

    `step()` does one unit of work (a relist if needed, then one watch request) and raises what
    went wrong; the caller decides how long to wait before the next step. `cut()` ends an open
    watch at once from another thread."""

    def __init__(
        self,
        api: client.ApiClient,
        resource: str,
        on_list: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[str, dict[str, Any]], None],
    ) -> None:
        self.api = api
        self.resource = resource
        self.path = RESOURCES[resource]
        self.on_list = on_list
        self.on_event = on_event
        self.resource_version: str | None = None
        self.relists = 0
        self.listed_at = datetime.now(UTC)
        self._open: urllib3.HTTPResponse | None = None
        self._lock = threading.Lock()
        self._cut = False

    def _get(self, query: list[tuple[str, Any]], stream: bool) -> urllib3.HTTPResponse:
        timeout = (5, WATCH_SECONDS + 30) if stream else (5, 60)
        resp = http(
            self.api, "GET", self.path, query, headers={"Accept": "application/json"},
            timeout=timeout,
        )  # fmt: skip
        return resp.response

    def relist(self) -> None:
        self.relists += 1
        self.listed_at = datetime.now(UTC)  # before the request: what the list may not show
        body = json.loads(self._get([], stream=False).data)
        self.resource_version = body["metadata"]["resourceVersion"]  # on_list may record it
        self.on_list(body.get("items", []))

    def step(self) -> None:
        """Relist when there is no resourceVersion, then watch until the server ends the
        request; raises GoneError (the version is forgotten: the next step relists),
        ApiException, or a connection error (the version is kept: the next step resumes)."""
        if self.resource_version is None:
            self.relist()
        try:
            self._watch_once()
        except GoneError:
            self.resource_version = None
            raise
        except ApiException as exc:
            if exc.status == 410:
                self.resource_version = None
                raise GoneError(str(exc)) from exc
            raise

    def _watch_once(self, seconds: int = WATCH_SECONDS) -> None:
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", self.resource_version),
            ("timeoutSeconds", seconds),
        ]
        resp = self._get(query, stream=True)
        with self._lock:
            if self._cut:
                # never back to the pool unread: the next request on that connection would
                # read this watch's first chunk as its status line (BadStatusLine('ae\r\n'))
                resp.close()
                return
            self._open = resp
        complete = False
        try:
            for line in stream_lines(resp):
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object", {})
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise GoneError(obj.get("message", "gone"))
                    raise ApiException(status=obj.get("code", 500), reason=obj.get("message"))
                if kind != "BOOKMARK":
                    self.on_event(kind, obj)
                rv = obj.get("metadata", {}).get("resourceVersion")
                if rv:
                    self.resource_version = rv
            complete = True
        finally:
            with self._lock:
                self._open = None
            if self._cut or not complete:  # unread bytes may stay on the connection
                resp.close()
            resp.release_conn()

    def replay(self, since: str, seconds: int) -> None:
        """Deliver every change since resourceVersion `since` (while the API server keeps that
        history: GoneError once compacted), for `seconds`; keeps no version for later steps."""
        self.resource_version = since
        try:
            self._watch_once(seconds)
        except ApiException as exc:
            if exc.status == 410:
                raise GoneError(str(exc)) from exc
            raise
        finally:
            self.resource_version = None

    def cut(self) -> None:
        """End the open watch now (from another thread); later steps return at once."""
        with self._lock:
            self._cut = True
            resp = self._open
        if resp is not None:
            resp.shutdown()
