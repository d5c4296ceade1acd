"""Health events as findings (`tranche.agent_protocol.Finding`), addressed to who must know.

Pure: `findings_for(event, node, claims, pod_of_pid)` answers (kind, namespace, subject,
detail, extra) tuples, `extra` being the finding's optional fields (the GPU, the XID). A
GPU's own change is support's (subject: the GPU's UUID). A fatal failure is also every pod's
whose claim uses that GPU; an application XID only the pod whose process the kernel log names
(found by its cgroup); nobody's pod when no process is named.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable

from nodeagent.checkpoint import PreparedClaim
from nodeagent.health import HealthEvent
from nodeagent.xid import Severity
from tranche import health_kinds as kinds

Finding = tuple[str, str, str, str, dict]


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%H:%M:%S UTC")


def _what(event: HealthEvent) -> str:
    return f"XID {event.xid} ({event.meaning})" if event.xid is not None else event.meaning


def _pods_on(claims: Iterable[PreparedClaim], uuid: str) -> list[tuple[str, str, str, str]]:
    """(namespace, pod, pod uid, claim uid) of every pod whose claim holds a share of GPU
    `uuid` (pods sharing one claim name the same claim)."""
    out = []
    for claim in claims:
        if any(d.uuid == uuid for d in claim.devices):
            for pod in claim.pods:
                ns, name, uid = ([*pod.split("/"), "", ""])[:3]
                out.append((ns or claim.namespace, name, uid, claim.uid))
    return out


def findings_for(
    event: HealthEvent,
    node: str,
    claims: Iterable[PreparedClaim],
    pod_of_pid: Callable[[int], str | None],
) -> list[Finding]:
    when, what, claims = _when(event.ts), _what(event), list(claims)
    extra = {"gpu": event.uuid, **({"xid": event.xid} if event.xid is not None else {})}
    if event.recovered:
        return [(kinds.GPU_RECOVERED, "-", event.uuid, f"{node}: {event.meaning} at {when}", extra)]
    if event.severity is Severity.FATAL:
        pods = _pods_on(claims, event.uuid)
        summary = f"{node}: {what} at {when}; tainted NoExecute, {len(pods)} pod(s) on it"
        out = [(kinds.GPU_FAILED, "-", event.uuid, summary, extra)]
        out += [
            (
                kinds.POD_GPU_FAILED,
                ns,
                name,
                f"the GPU your pod ran on failed ({what}, {when}); Kubernetes moves your pod "
                "to a healthy GPU",
                {**extra, "claim": claim_uid},
            )
            for ns, name, _, claim_uid in pods
        ]
        return out
    if event.severity is Severity.UNKNOWN:
        detail = f"{node}: {what} at {when}; not drained"
        return [(kinds.GPU_XID_UNKNOWN, "-", event.uuid, detail, extra)]
    uid = pod_of_pid(event.pid) if event.pid else None
    for ns, name, pod_uid, _ in _pods_on(claims, event.uuid):
        if uid and pod_uid == uid:
            detail = (
                f"a process of your pod (pid {event.pid}) hit {what} at {when}: the fault is "
                "in the program, the GPU is healthy; check the program's CUDA errors"
            )
            return [(kinds.POD_XID, ns, name, detail, extra)]
    return []  # no process named, or not a pod's: nobody's pod is told
