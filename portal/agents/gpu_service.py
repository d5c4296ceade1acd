"""Support's actions on one GPU: out for maintenance, back in service (issue #34).

`set_gpu_service(actor, node, gpu, action)` stores a `GpuServiceMark` and its `AuditLog` row in
one transaction, then (on commit) asks the controller to apply the maintenance taints:
- out for maintenance: a DeviceTaintRule `tranche.dev/gpu-maintenance:NoSchedule` on the
  device (controller/gpu_maintenance.py). The scheduler places no new claim there; claims
  already allocated keep running until they end (NoSchedule evicts nothing).
- back in service: the rule is deleted, and the portal's answers to the node's agent carry the
  mark (`StatusAck.in_service`) until the agent reports the GPU recovered, so the agent drops
  its own NoExecute health taint (a fatal XID) once the GPU answers.
The caller checks who may act (the support console: support staff and superusers only).
Idempotent in effect: the newest mark of a GPU is its state; marking it again adds a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from portal.agents.models import GpuServiceMark, NodeToken
from portal.audit.services import record_audit
from portal.core.queue import enqueue_gpu_maintenance
from tranche.agent_protocol import IN_SERVICE_REPEATED_FOR, InService

ACTIONS = (GpuServiceMark.MAINTENANCE, GpuServiceMark.IN_SERVICE)


class UnknownGpuError(ValueError):
    """The node's agent never reported that GPU: nothing was marked."""


def _known(node: str, gpu: str) -> bool:
    gpus = NodeToken.objects.filter(node_name=node).values_list("gpus", flat=True).first()
    return any(isinstance(g, dict) and g.get("uuid") == gpu for g in gpus or [])


def set_gpu_service(actor, node: str, gpu: str, action: str) -> GpuServiceMark:
    """Mark `gpu` of `node` out for maintenance or back in service; audited
    (`gpu.maintenance` / `gpu.in_service`, before: the previous mark's action)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}: use one of {', '.join(ACTIONS)}")
    if not _known(node, gpu):
        raise UnknownGpuError(
            f"node {node} has not reported a GPU {gpu}: check the node and the UUID on the "
            "fleet table; nothing was marked"
        )
    with transaction.atomic():
        before = current_action(gpu)
        mark = GpuServiceMark.objects.create(node_name=node, gpu_uuid=gpu, action=action, by=actor)
        record_audit(
            actor=actor,
            action="gpu.maintenance" if action == GpuServiceMark.MAINTENANCE else "gpu.in_service",
            obj=mark,
            before={"action": before or "in-service"},
            after={"action": action, "node": node, "gpu": gpu},
            system="support",
        )
        enqueue_gpu_maintenance()
    return mark


def current_action(gpu: str) -> str | None:
    """The GPU's newest mark's action; None when support never marked it."""
    return GpuServiceMark.objects.filter(gpu_uuid=gpu).values_list("action", flat=True).first()


@dataclass(frozen=True)
class InMaintenance:
    node: str
    gpu: str
    since: datetime
    by: str


def in_maintenance() -> list[InMaintenance]:
    """GPUs whose newest mark is "out for maintenance" (the controller's desired rules and
    the support console's list), by node and GPU."""
    newest: dict[str, GpuServiceMark] = {}
    for mark in GpuServiceMark.objects.select_related("by").order_by("at", "pk"):
        newest[mark.gpu_uuid] = mark
    return sorted(
        (
            InMaintenance(m.node_name, m.gpu_uuid, m.at, m.by.get_username() if m.by else "")
            for m in newest.values()
            if m.action == GpuServiceMark.MAINTENANCE
        ),
        key=lambda m: (m.node, m.gpu),
    )


def in_service_for(node: str, now: datetime | None = None) -> list[InService]:
    """What the portal's answer to `node`'s agent repeats: its GPUs marked back in service
    that the agent has not reported recovered since, for at most IN_SERVICE_REPEATED_FOR."""
    since = (now or timezone.now()) - timedelta(seconds=IN_SERVICE_REPEATED_FOR)
    marks = GpuServiceMark.objects.filter(
        node_name=node, action=GpuServiceMark.IN_SERVICE, settled_at__isnull=True, at__gte=since
    ).values_list("gpu_uuid", "at")
    return [InService(gpu=gpu, at=at.timestamp()) for gpu, at in marks]


def settle(gpus: set[str]) -> None:
    """The agent reported these GPUs recovered: their pending in-service marks are done
    (called inside the ingest's transaction)."""
    if gpus:
        GpuServiceMark.objects.filter(
            gpu_uuid__in=gpus, action=GpuServiceMark.IN_SERVICE, settled_at__isnull=True
        ).update(settled_at=timezone.now())
