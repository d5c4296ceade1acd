"""Which GPU health findings of a node's frame the portal believes, before anything is stored.

A health finding opens outages, credits invoices and tells a tenant its GPU failed, so a node may
speak only of what is its own, as the cluster (not the agent) knows it:
- the GPU: one the node publishes (the GPUs its agent lists in this frame or listed before);
  a GPU finding's subject is that GPU;
- the pod (the pod- kinds): in a Tranche project's namespace, bound to this node by the
  cluster (`portal.cluster.bindings`, the watcher's spec.nodeName), and holding a claim
  allocated on this node that was open at the finding's time (`UsageRecord`, the watcher's
  ledger); where the node already reported the pod's slice, on that GPU;
- the time: inside a bounded window around the portal's clock (HEALTH_REPORT_PAST_SECONDS
  back, HEALTH_REPORT_FUTURE_SECONDS ahead).
Anything else is refused: counted (`tranche_portal_agent_health_refused_total`), kept as an
alert on the node's token row (`NodeToken.refused_health`, the support console), and never stored
as an event. `admit_health` only reads; the caller stores what it admits.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import redis
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from portal.agents.models import HEALTH_KINDS, NodeToken, PodSliceStatus
from portal.cluster.bindings import pod_bindings
from portal.cluster.models import UsageRecord
from portal.core.request_metrics import count_health_refused
from portal.tenants.models import Project
from tranche.agent_protocol import Finding, GpuReport

POD_KINDS = ("pod-gpu-failed", "pod-xid")
REFUSALS_KEPT = 20  # per node, on its token row: the support console's alert shows them


@dataclass(frozen=True)
class RefusedFinding:
    """A health finding the portal did not believe: `cause` is a bounded metric label."""

    finding: Finding
    cause: str  # "gpu", "pod", "claim", "time"
    reason: str

    def alert(self, at: datetime) -> dict:
        """What the node's token row keeps of it (the support console's words)."""
        f = self.finding
        return {
            "at": at.timestamp(),
            "kind": f["kind"],
            "namespace": f["namespace"],
            "subject": f["subject"],
            "reason": self.reason,
        }


def _window(now: datetime) -> tuple[float, float]:
    past = timedelta(seconds=settings.HEALTH_REPORT_PAST_SECONDS)
    future = timedelta(seconds=settings.HEALTH_REPORT_FUTURE_SECONDS)
    return (now - past).timestamp(), (now + future).timestamp()


def _published_gpus(node_name: str, gpus: list[GpuReport]) -> set[str]:
    stored = NodeToken.objects.filter(node_name=node_name).values_list("gpus", flat=True).first()
    listed = [*gpus, *(stored if isinstance(stored, list) else [])]
    return {g["uuid"] for g in listed if isinstance(g, dict) and g.get("uuid")}


def _holds_claim(project_id: int, node_name: str, at: datetime) -> bool:
    return (
        UsageRecord.objects.filter(project_id=project_id, node=node_name, allocated_at__lte=at)
        .filter(Q(released_at__isnull=True) | Q(released_at__gte=at))
        .exists()
    )


class _PodCheck:
    """The pod questions of one frame, asked once per pod."""

    def __init__(self, node_name: str, pod_findings: list[Finding]) -> None:
        self.node = node_name
        namespaces = {f["namespace"] for f in pod_findings}
        self.projects = dict(
            Project.objects.filter(namespace__in=namespaces).values_list("namespace", "id")
        )
        wanted = [
            (self.projects[f["namespace"]], f["subject"])
            for f in pod_findings
            if f["namespace"] in self.projects
        ]
        try:
            self.bound: dict | None = pod_bindings(wanted)
        except redis.RedisError:
            self.bound = None  # the claims ledger (the database) still answers
        rows = PodSliceStatus.objects.filter(node_name=node_name, namespace__in=namespaces)
        self.slice_gpus = {
            (ns, pod): gpu for ns, pod, gpu in rows.values_list("namespace", "pod_name", "gpu_uuid")
        }

    def refusal(self, f: Finding, gpu: str, at: datetime) -> tuple[str, str] | None:
        where = f"{f['namespace']}/{f['subject']}"
        project_id = self.projects.get(f["namespace"])
        if project_id is None:
            return "pod", f"{where}: the namespace is not a Tranche project's"
        if self.bound is not None:
            binding = self.bound.get((project_id, f["subject"]))
            if binding is None or binding["node"] != self.node:
                on = f"it runs on {binding['node']}" if binding and binding["node"] else "none"
                return "pod", f"{where}: the cluster bound no such pod to {self.node} ({on})"
        if not _holds_claim(project_id, self.node, at):
            return "claim", f"{where}: the project held no claim on {self.node} at that time"
        reported = self.slice_gpus.get((f["namespace"], f["subject"]))
        if reported and reported != gpu:
            return "gpu", f"{where}: the pod's slice is on GPU {reported}, not {gpu}"
        return None


def admit_health(
    node_name: str, findings: list[Finding], gpus: list[GpuReport], now: datetime | None = None
) -> tuple[list[Finding], list[RefusedFinding]]:
    """Split a frame's findings into those to store (every non-health finding, and the health
    findings that pass the checks above) and the refused health findings, with their reasons."""
    now = now or timezone.now()
    health = [f for f in findings if f["kind"] in HEALTH_KINDS]
    if not health:
        return list(findings), []
    earliest, latest = _window(now)
    published = _published_gpus(node_name, gpus)
    pods = _PodCheck(node_name, [f for f in health if f["kind"] in POD_KINDS])
    admitted, refused = [], []
    for f in findings:
        if f["kind"] not in HEALTH_KINDS:
            admitted.append(f)
            continue
        gpu = f.get("gpu") or f["subject"]
        if not earliest <= f["ts"] <= latest:
            at = datetime.fromtimestamp(f["ts"], tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            why = ("time", f"its time {at} is outside the window the portal accepts")
        elif gpu not in published:
            why = ("gpu", f"GPU {gpu} is not one {node_name} publishes")
        elif f["kind"] not in POD_KINDS and f["subject"] != gpu:
            why = ("gpu", f"a GPU finding about {f['subject']} names GPU {gpu}")
        elif f["kind"] in POD_KINDS:
            why = pods.refusal(f, gpu, datetime.fromtimestamp(f["ts"], tz=UTC))
        else:
            why = None
        if why is None:
            admitted.append(f)
        else:
            refused.append(RefusedFinding(f, *why))
            count_health_refused(why[0])
    return admitted, refused


def keep_refusals(refused: list[RefusedFinding], kept: list | None) -> list:
    """The node's refusal alerts with these added, the last REFUSALS_KEPT."""
    now = timezone.now()
    return [*(kept or []), *(r.alert(now) for r in refused)][-REFUSALS_KEPT:]
