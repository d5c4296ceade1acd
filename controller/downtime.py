"""Close the slices' outages (`portal.cluster.outages`) from the cluster: a pod's Running time
ends the outage of the slice it replaces. Called by the watcher for each pod event and relisted
pod; read by `controller.observe`, written through `controller.store`; never raises (the next
event or relist repairs it)."""

from __future__ import annotations

import logging
from typing import Any

from controller import store
from controller.observe import pod_running

log = logging.getLogger(__name__)


def observe_pod(kind: str, pod: dict[str, Any]) -> None:
    """End the outage a Running replacement pod closes (idempotent)."""
    if kind == "DELETED":
        return
    fact = pod_running(pod)
    if fact is None:
        return
    try:
        store.record_pod_running(fact)
    except Exception:  # the database may be restarting: the next event or relist repairs it
        log.exception("outages: could not record pod %s running", fact.pod)
    finally:
        store.release_connection()  # a stream thread must not keep a pooled connection
