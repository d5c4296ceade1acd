"""Feed the billing ledger's outages from the cluster: a pod's Running time ends the outage of
the slice it replaces (`portal.billing.downtime.observe_running`). Called by the watcher for
each pod event and relisted pod; never raises (the next event or relist repairs it)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.utils.dateparse import parse_datetime

from controller.metering import _release_connection as release_connection

log = logging.getLogger(__name__)


def running_since(pod: dict[str, Any]) -> datetime | None:
    """When the pod began running (the cluster's time): the last of its containers' start
    times once all run; None while it is not Running."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return None
    starts = []
    for cs in status.get("containerStatuses") or []:
        started = ((cs.get("state") or {}).get("running") or {}).get("startedAt")
        if not started:
            return None  # a container not running: the pod's slice is not serving yet
        starts.append(parse_datetime(started))
    return max(starts) if starts and None not in starts else None


def observe_pod(kind: str, pod: dict[str, Any]) -> None:
    """End the outage a Running replacement pod closes (idempotent)."""
    if kind == "DELETED":
        return
    running_at = running_since(pod)
    meta = pod.get("metadata") or {}
    created = parse_datetime(meta.get("creationTimestamp") or "")
    classes = [
        rc.get("resourceClaimTemplateName", "")
        for rc in (pod.get("spec") or {}).get("resourceClaims") or []
        if rc.get("resourceClaimTemplateName")
    ]
    if running_at is None or created is None or not classes:
        return
    from portal.billing.downtime import observe_running

    try:
        observe_running(
            meta.get("namespace", ""), meta.get("name", ""), classes, created, running_at
        )
    except Exception:  # the database may be restarting: the next event or relist repairs it
        log.exception("outages: could not record pod %s running", meta.get("name"))
    finally:
        release_connection()  # a stream thread must not keep a pooled connection
