"""Tells kubelet-lite when the pods of its node changed, so it lists them only then.

Listing the node's pods every tick cost more than everything else the agent does at 32 pods
(one LIST and its JSON every second); a watch on the same field selector costs nothing while
nothing changes. The watch only raises a flag: kubelet-lite still acts on a full LIST (level
triggered), and lists anyway every `RESYNC_SECONDS`, so a lost event, a broken watch or one the
API server refuses delays a change by at most that long.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)
WATCH_SECONDS = 240  # one watch request's life; the server closes it and we start another
RETRY_SECONDS = 2.0


class PodChanges:
    """A background watch of the pods bound to `node`; `changed` is set on every event (and
    when the watch restarts, since events may have been missed meanwhile)."""

    def __init__(self, core_api, node: str) -> None:
        self.core = core_api
        self.node = node
        self.changed = threading.Event()
        self.changed.set()  # nothing listed yet
        self.events = 0  # pod events seen (restarts set `changed` without counting here)
        self._closing = threading.Event()
        self._watch = None
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._closing.set()
        if self._watch is not None:
            self._watch.stop()

    def _run(self) -> None:
        from kubernetes import watch

        version = None
        while not self._closing.is_set():
            self._watch = watch.Watch()
            kwargs = {
                "field_selector": f"spec.nodeName={self.node}",
                "timeout_seconds": WATCH_SECONDS,
                "allow_watch_bookmarks": True,
                "deserialize": False,  # only the type and resourceVersion are read
            }
            if version:
                kwargs["resource_version"] = version
            try:
                for event in self._watch.stream(self.core.list_pod_for_all_namespaces, **kwargs):
                    meta = (event.get("object") or {}).get("metadata") or {}
                    version = meta.get("resourceVersion") or version
                    if event.get("type") == "ERROR":  # e.g. 410 Gone: start afresh
                        version = None
                        self.changed.set()
                        break
                    if event.get("type") != "BOOKMARK":
                        self.events += 1
                        self.changed.set()
            except Exception as exc:  # any failure: the periodic resync covers the gap
                if self._closing.is_set():
                    return
                log.debug("pod watch of %s interrupted, restarting: %s", self.node, exc)
                version = None
                self.changed.set()
                self._closing.wait(RETRY_SECONDS)
