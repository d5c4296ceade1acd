"""The watcher's only writer: folds `ClusterState` into portal state through portal services.

Per tenant namespace changed since the last flush, the claims allocated/pending and the pending
reason of each DeviceClass go to `portal.orders.lifecycle.record_slice_usage` (the quota page
reads them; it writes only on change), the namespace's pods, refused workloads and quota status to
`portal.status.services.record_cluster_view` (the live page's phase and reason per pod, the quota
page's CPU/RAM used and its Pending words), and each pod's phase, node and uid to Redis through
`portal.agents.bindings` (the agents' ingest accepts a pod's report only from its node). A claim
gone from a namespace whose cancel waits for it sends that project's reconcile at once. A flush
that fails (PostgreSQL restarting) gives its namespaces back to the state, so what changed during
the outage is written once it is over.
"""

from __future__ import annotations

import logging
import os
import socket
import time

from django.db import connections

from controller import metrics
from controller.watch.state import ClusterState, pod_states
from controller.watch_hints import cancel_waits_for_release
from portal.agents.bindings import write_pod_states
from portal.core import heartbeats
from portal.orders import lifecycle
from portal.orders.models import ProjectUsage
from portal.status import services as status_services
from portal.tenants.models import Project

log = logging.getLogger("controller.watch")
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
        # never written: bench/scale.py's fan-out waited for a binding that never came).
        self._unknown: set[str] = set()
        # the pod's name where the chart gives it: two replicas on one host network share the
        # host name, and which of them is writing is what a takeover is judged by
        self.process_name = f"watcher@{os.environ.get('POD_NAME') or socket.gethostname()}"

    def projects(self) -> dict[str, int]:
        """namespace -> project id, re-read every PROJECT_REFRESH_SECONDS."""
        if time.monotonic() - self._projects_at > PROJECT_REFRESH_SECONDS:
            self._projects = dict(Project.objects.values_list("namespace", "pk"))
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
                pid = projects.get(ns)
                if pid is not None:
                    self._write_namespace(pid, ns)
                    written += 1
                else:
                    self._unknown.add(ns)
                left.discard(ns)
            for ns in self.state.take_released() & set(projects):
                cancel_waits_for_release(projects[ns])  # a cancel waiting for it ends now
            heartbeats.beat(heartbeats.WATCHER, self.process_name)
            taken = self.state.taken_at
            metrics.observe_flush(True, time.monotonic() - taken if dirty and taken else None)
            return written
        except Exception:
            metrics.observe_flush(False, None)
            self.state.mark_dirty(left)
            connections.close_all()
            raise

    def _write_namespace(self, project_id: int, ns: str) -> None:
        usage = self.state.usage(ns)
        words = status_services.record_cluster_view(
            project_id=project_id, namespace=ns, **self.state.cluster_view(ns)
        )
        known = ProjectUsage.objects.filter(project_id=project_id).values_list(
            "product__device_class", flat=True
        )
        for cls in set(usage) | set(known):
            allocated, pending, reason = usage.get(cls, (0, 0, ""))
            try:
                lifecycle.record_slice_usage(
                    project_id=project_id,
                    device_class=cls,
                    allocated=allocated,
                    pending=pending,
                    pending_reason=words.get(cls, reason) if pending else "",
                )
            except ValueError:
                log.debug("ignoring claims of unknown class %s in %s", cls, ns)
        write_pod_states(project_id, pod_states(self.state, ns))

    def close(self) -> None:
        connections.close_all()  # this thread's connection; Django never closes it otherwise
