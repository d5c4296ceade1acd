"""The controller's one reader of cluster objects (pure): ResourceClaims, Pods, Events and
ResourceQuotas in, `tranche.observed` facts out.

The watcher folds what it reads here into its state and hands `NamespaceView`s and
`ObservedClaim`s to `controller.store`; the reconcile counts a namespace's allocated claims with
`allocated_by_class`. Nothing else in Tranche parses these objects: the portal stores the facts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from tranche.names import CLAIM_REQUEST_NAME, DRIVER
from tranche.observed import ObservedClaim, PodRunning, QuotaStatus
from tranche.pod_reasons import ContainerFacts, PodFacts


def claim_class(claim: dict[str, Any]) -> str:
    """The DeviceClass of a claim's first request ("" when it names none)."""
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    exactly = requests[0].get("exactly", {}) if requests else {}
    return exactly.get("deviceClassName", "")


def claim_allocated(claim: dict[str, Any]) -> bool:
    """Whether the scheduler has allocated the claim."""
    return bool((claim.get("status") or {}).get("allocation"))


def allocated_by_class(claims: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Allocated claims per DeviceClass, counting Tranche's own request (`CLAIM_REQUEST_NAME`)
    only (the reconcile's cancel grace decisions)."""
    counts: Counter[str] = Counter()
    for claim in claims:
        if not claim_allocated(claim):
            continue
        for req in claim.get("spec", {}).get("devices", {}).get("requests", []):
            if req.get("name") == CLAIM_REQUEST_NAME and "exactly" in req:
                counts[req["exactly"].get("deviceClassName", "")] += 1
    return dict(counts)


def _time(value: Any) -> datetime | None:
    """An RFC 3339 time as the API server writes it (`2026-01-02T10:00:00Z`), else None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _allocation_time(meta: dict[str, Any]) -> datetime | None:
    """When `status.allocation` was last written (the scheduler's managedFields entry)."""
    best = None
    for entry in meta.get("managedFields") or []:
        fields = (entry.get("fieldsV1") or {}).get("f:status") or {}
        if entry.get("subresource") == "status" and "f:allocation" in fields:
            at = _time(entry.get("time"))
            best = at if best is None or (at and at > best) else best
    return best


def observed_claim(claim: dict[str, Any]) -> ObservedClaim:
    """A claim's lifetime as the ledger needs it: class, device, and the cluster's own times."""
    meta = claim.get("metadata") or {}
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    first = results[0] if results else {}
    return ObservedClaim(
        uid=meta.get("uid", ""),
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        device_class=claim_class(claim),
        allocated=bool(allocation),
        node=first.get("pool", ""),
        device=first.get("device", ""),
        allocated_at=_allocation_time(meta) if allocation else None,
        deleted_at=_time(meta.get("deletionTimestamp")),
    )


def quota_status(quota: dict[str, Any]) -> QuotaStatus:
    """The hard limits and use a ResourceQuota's status reports."""
    status = quota.get("status") or {}
    used = status.get("used")
    return QuotaStatus(
        hard=dict(status.get("hard") or {}), used=dict(used) if used is not None else None
    )


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
        # the node the pod is bound to and its uid: the agents' ingest accepts a pod's report only
        # from that node (portal.cluster.bindings)
        "node": pod.get("spec", {}).get("nodeName", ""),
        "uid": pod.get("metadata", {}).get("uid", ""),
        "unschedulable": next(
            (
                c.get("message") or c.get("reason", "")
                for c in status.get("conditions", [])
                if c.get("type") == "PodScheduled" and c.get("status") == "False"
            ),
            "",
        ),
        "containers": container_facts(pod),
        "classes": templates,
        "unclaimed_templates": unclaimed,
    }


def container_facts(pod: dict[str, Any]) -> tuple[ContainerFacts, ...]:
    """Each container's state as the kubelet reports it, with its RAM limit from the spec."""
    limits = {
        c.get("name"): c.get("resources", {}).get("limits", {}).get("memory", "")
        for c in pod.get("spec", {}).get("containers", [])
    }
    out = []
    for cs in pod.get("status", {}).get("containerStatuses", []):
        state, last = cs.get("state", {}), cs.get("lastState", {})
        waiting, done, before = (
            state.get("waiting") or {},
            state.get("terminated") or {},
            last.get("terminated") or {},
        )
        out.append(
            ContainerFacts(
                name=cs.get("name", ""),
                waiting_reason=waiting.get("reason", ""),
                waiting_message=waiting.get("message", ""),
                terminated_reason=done.get("reason", ""),
                terminated_exit_code=done.get("exitCode"),
                last_terminated_reason=before.get("reason", ""),
                last_exit_code=before.get("exitCode"),
                restart_count=cs.get("restartCount", 0),
                memory_limit=limits.get(cs.get("name"), ""),
            )
        )
    return tuple(out)


def facts_of(
    name: str, summary: dict[str, Any], events: Iterable[tuple[str, str, str]]
) -> PodFacts:
    """The classifier's view of one pod from its `pod_summary` and its recent Warning events
    as (time, reason, message)."""
    timeline = tuple(events)
    return PodFacts(
        name=name,
        phase=summary["phase"],
        unschedulable_message=summary["unschedulable"],
        containers=summary["containers"],
        gpu_classes=tuple(summary["classes"]),
        unclaimed_classes=tuple(summary["unclaimed_templates"]),
        events=tuple((reason, message) for _time, reason, message in timeline),
        timeline=timeline,
    )


def event_time(event: dict[str, Any]) -> str:
    """When an Event last happened, as the cluster wrote it (RFC 3339): the last repeat of a
    series, else lastTimestamp (core/v1 writers), else eventTime (events.k8s.io writers), else
    when the object was made."""
    series = event.get("series") or {}
    return (
        series.get("lastObservedTime")
        or event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("metadata", {}).get("creationTimestamp")
        or ""
    )


def device_of_gpu(slices: Iterable[dict[str, Any]], gpu_uuid: str) -> str | None:
    """The DRA device name (e.g. "gpu-2") whose `uuid` attribute is `gpu_uuid` in Tranche's
    ResourceSlices; None if no slice publishes it."""
    for s in slices:
        if s["spec"].get("driver") != DRIVER:
            continue
        for d in s["spec"].get("devices", []):
            if d.get("attributes", {}).get("uuid", {}).get("string") == gpu_uuid:
                return d["name"]
    return None


def running_since(pod: dict[str, Any]) -> datetime | None:
    """When the pod began running (the cluster's time): the last of its containers' start
    times once all run; None while it is not Running."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return None
    starts = []
    for cs in status.get("containerStatuses") or []:
        started = _time(((cs.get("state") or {}).get("running") or {}).get("startedAt"))
        if started is None:
            return None  # a container not running: the pod's slice is not serving yet
        starts.append(started)
    return max(starts) if starts else None


def pod_running(pod: dict[str, Any]) -> PodRunning | None:
    """The pod as a `PodRunning` fact, or None while it is not running or holds no claim made
    from a template (only those are slices sold)."""
    meta = pod.get("metadata") or {}
    classes = tuple(
        rc["resourceClaimTemplateName"]
        for rc in (pod.get("spec") or {}).get("resourceClaims") or []
        if rc.get("resourceClaimTemplateName")
    )
    running_at = running_since(pod)
    created = _time(meta.get("creationTimestamp"))
    if running_at is None or created is None or not classes:
        return None
    return PodRunning(meta.get("namespace", ""), meta.get("name", ""), classes, created, running_at)
