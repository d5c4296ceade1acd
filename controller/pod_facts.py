"""What the watcher keeps of one claim or pod (pure): class and allocation of a claim; phase,
pending reason, claim template classes and container states of a pod."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tranche.pod_reasons import ContainerFacts, PodFacts


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
        # the node the pod is bound to and its uid: the agents' ingest accepts a pod's report only
        # from that node (portal.agents.bindings)
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
