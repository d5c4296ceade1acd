"""The watcher's only writer: hands each changed namespace's `NamespaceView` to the store.

Per tenant namespace changed since the last flush, `ClusterState.view` says what the cluster says
about it (pods with phase, reason and binding, refused workloads, quota status, slices allocated
and pending per DeviceClass) and `controller.store.record_namespace` stores it in the portal's
room for observed state. A claim gone from a namespace whose cancel waits for it sends that
project's reconcile at once (`controller.hints`). A flush that fails (PostgreSQL restarting)
gives its namespaces back to the state, so what changed during the outage is written once it is
over.
"""

from __future__ import annotations

import os
import socket
import time

from django.db import connections

from controller import desired, hints, metrics, store
from controller.watch.state import ClusterState

PROJECT_REFRESH_SECONDS = 10.0


class UsageWriter:
    """Writes usage of changed tenant namespaces; knows which namespaces are projects."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._projects: dict[str, int] = {}
        self._projects_at = float("-inf")
        # Namespaces that changed while no project was known for them. A project's namespace
        # and first pods can appear before the next re-read of the projects; what they did then
        # is written once the project is known (else a pod that changes no more after that is
        # never written, and the agents' ingest never learns its binding).
        self._unknown: set[str] = set()
        # the pod's name where the chart gives it: two replicas on one host network share the
        # host name, and which of them is writing is what a takeover is judged by
        self.process_name = f"watcher@{os.environ.get('POD_NAME') or socket.gethostname()}"

    def projects(self) -> dict[str, int]:
        """namespace -> project id, re-read every PROJECT_REFRESH_SECONDS."""
        if time.monotonic() - self._projects_at > PROJECT_REFRESH_SECONDS:
            self._projects = desired.project_namespaces()
            self._projects_at = time.monotonic()
            known = self._unknown & set(self._projects)
            self._unknown -= known
            self.state.mark_dirty(known)
        return self._projects

    def flush(self) -> int:
        """Write usage of changed tenant namespaces; returns how many were written.

        On a database error the namespaces not yet written are marked dirty again, the broken
        connection is dropped (the next flush opens a fresh one) and the error propagates."""
        try:
            # Before taking the dirty set: a re-read of the projects marks the namespaces it
            # just learnt about dirty again, and this flush writes them.
            projects = self.projects()
        except Exception:
            connections.close_all()
            raise
        dirty = self.state.take_dirty()
        left = set(dirty)
        try:
            written = 0
            for ns in dirty:
                if ns in projects and store.record_namespace(self.state.view(ns)):
                    written += 1
                elif ns not in projects:
                    self._unknown.add(ns)
                left.discard(ns)
            for ns in self.state.take_released() & set(projects):
                if desired.cancel_waits(projects[ns]):  # a cancel waiting for it ends now
                    hints.send_reconcile(projects[ns])
            store.beat_watcher(self.process_name)
            taken = self.state.taken_at
            metrics.observe_flush(True, time.monotonic() - taken if dirty and taken else None)
            return written
        except Exception:
            metrics.observe_flush(False, None)
            self.state.mark_dirty(left)
            connections.close_all()
            raise

    def close(self) -> None:
        connections.close_all()  # this thread's connection; Django never closes it otherwise
