"""GPU health in the portal: the agents' health findings kept as rows, and what reads them.

`record_health(node, findings)` (called inside the ingest's transaction) stores each health
finding (`tranche.health_kinds`) as a `GpuHealthEvent`, the pod ones linked to the project
owning the namespace, opens the outage of each slice whose GPU failed (`cluster.outages`), and
answers the live events for those projects' pages. Reads: `project_events` (a tenant's live
page: only its own project's rows), `unhealthy_gpus` (the support console: each GPU whose
latest failure has no recovery after it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.utils import timezone

from portal.agents import gpu_service
from portal.agents.events import GpuHealthLiveEvent
from portal.agents.models import GpuHealthEvent, NodeToken
from portal.cluster import outages
from portal.tenants.models import Project
from tranche import health_kinds as kinds
from tranche.agent_protocol import Finding
from tranche.health_kinds import HEALTH_KINDS, TENANT_KINDS

SHOWN_FOR = timedelta(days=7)  # how far back the live page lists its pods' GPU incidents


def _live_text(row: GpuHealthEvent) -> str:
    return json.dumps({"type": "gpu-event", **event_json(row)})


def event_json(row: GpuHealthEvent) -> dict:
    """What the live page shows of one incident (the same for the first render and live)."""
    return {
        "kind": row.kind,
        "pod": row.pod_name,
        "at": row.occurred_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "text": row.detail,
    }


def record_health(node_name: str, findings: list[Finding]) -> list[tuple[int, GpuHealthLiveEvent]]:
    """Store the frame's health findings; (project id, live event) for each tenant's one.
    Runs in the caller's transaction; the agent sends each finding once (it is acked with the
    frame), so a resent frame is the only way a row can repeat, and then it says the same."""
    health = [f for f in findings if f["kind"] in HEALTH_KINDS]
    if not health:
        return []
    namespaces = {f["namespace"] for f in health if f["kind"] in TENANT_KINDS}
    projects = dict(Project.objects.filter(namespace__in=namespaces).values_list("namespace", "id"))
    rows = [
        GpuHealthEvent(
            node_name=node_name,
            gpu_uuid=f.get("gpu") or f["subject"],
            kind=f["kind"],
            xid=f.get("xid"),
            project_id=projects.get(f["namespace"]) if f["kind"] in TENANT_KINDS else None,
            namespace="" if f["namespace"] == "-" else f["namespace"],
            pod_name=f["subject"] if f["kind"] in TENANT_KINDS else "",
            detail=f["detail"],
            occurred_at=datetime.fromtimestamp(f["ts"], tz=UTC),
        )
        for f in health
    ]
    GpuHealthEvent.objects.bulk_create(rows)
    outages.open_outages(
        outages.GpuFailure(
            r.project_id,
            r.pod_name,
            node_name,
            r.gpu_uuid,
            r.xid,
            r.occurred_at,
            f.get("claim", ""),
        )
        for r, f in zip(rows, health, strict=True)
        if r.kind == kinds.POD_GPU_FAILED and r.project_id is not None
    )
    gpu_service.settle({row.gpu_uuid for row in rows if row.kind == kinds.GPU_RECOVERED})
    return [
        (row.project_id, GpuHealthLiveEvent(type="gpu.health", text=_live_text(row)))
        for row in rows
        if row.project_id is not None
    ]


def project_events(project_id: int, now: datetime | None = None) -> list[dict]:
    """The project's pods' GPU incidents of the last week, newest first."""
    since = (now or timezone.now()) - SHOWN_FOR
    rows = GpuHealthEvent.objects.filter(project_id=project_id, occurred_at__gte=since)
    return [event_json(r) for r in rows[:50]]


@dataclass(frozen=True)
class UnhealthyGpu:
    node: str
    model: str
    uuid: str
    xid: int | None
    since: datetime
    detail: str
    pods: list[str]  # namespace/pod of every slice on it when it failed (Kubernetes evicted them)


def unhealthy_gpus() -> list[UnhealthyGpu]:
    """GPUs whose latest failure no recovery followed, oldest failure first."""
    latest: dict[str, GpuHealthEvent] = {}
    pods: dict[str, list[str]] = {}
    rows = GpuHealthEvent.objects.filter(
        kind__in=(kinds.GPU_FAILED, kinds.GPU_RECOVERED, kinds.POD_GPU_FAILED)
    )
    for row in rows.order_by("occurred_at", "pk"):
        if row.kind == kinds.POD_GPU_FAILED:
            pods.setdefault(row.gpu_uuid, []).append(f"{row.namespace}/{row.pod_name}")
        elif row.kind == kinds.GPU_RECOVERED:
            latest.pop(row.gpu_uuid, None)
            pods.pop(row.gpu_uuid, None)
        elif row.gpu_uuid not in latest:  # the first failure names it; later ones do not move it
            latest[row.gpu_uuid] = row
            pods[row.gpu_uuid] = pods.get(row.gpu_uuid, [])
    models = {
        g.get("uuid"): g.get("name", "")
        for gpus in NodeToken.objects.values_list("gpus", flat=True)
        for g in (gpus if isinstance(gpus, list) else [])
        if isinstance(g, dict)
    }
    return [
        UnhealthyGpu(
            r.node_name,
            models.get(uuid, ""),
            uuid,
            r.xid,
            r.occurred_at,
            r.detail,
            sorted(set(pods.get(uuid, []))),
        )
        for uuid, r in sorted(latest.items(), key=lambda kv: kv[1].occurred_at)
    ]
