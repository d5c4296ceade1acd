"""The support console's reads: the fleet (nodes → GPUs → slices held, free slices per product),
alerts, and search. Support staff only (`selectors.is_status_staff`); the views 404
for everyone else, so tenants cannot tell the console exists."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from portal.agents.models import NodeToken, PodSliceStatus
from portal.catalog.models import Product
from portal.cluster.models import PodState
from portal.core.cluster import cluster_answers
from portal.orders.backlog import WAITING, check_backlog
from portal.orders.models import Order
from portal.status import idle
from portal.tenants.models import Project
from tranche import health_kinds as kinds


def agent_late() -> timedelta:
    """Two missed reports (settings.AGENT_LATE_SECONDS): the live page's stale mark too."""
    return timedelta(seconds=settings.AGENT_LATE_SECONDS)


PENDING_TOO_LONG = timedelta(minutes=10)
RECENT_FAILURES = timedelta(days=1)
MIB = 1024 * 1024


@dataclass
class GpuView:
    uuid: str
    name: str
    memory_total_mib: int
    slices: list[dict] = field(default_factory=list)  # pod, project, organization, memory, target
    free: dict[str, int] = field(default_factory=dict)  # product name -> slices that still fit


@dataclass
class NodeView:
    name: str
    last_seen: datetime | None
    silent: bool
    gpus: list[GpuView]


@dataclass(frozen=True)
class Alert:
    kind: str
    text: str
    project_id: int | None = None


def fleet(now: datetime | None = None) -> list[NodeView]:
    """Every node with an agent token: its GPUs, the slices on each, what still fits."""
    now = now or timezone.now()
    products = list(Product.objects.filter(sellable=True).order_by("memory_mib"))
    held: dict[str, list[PodSliceStatus]] = {}
    for s in PodSliceStatus.objects.select_related("project__organization"):
        held.setdefault(s.gpu_uuid, []).append(s)
    nodes = []
    for token in NodeToken.objects.filter(revoked_at__isnull=True).order_by("node_name"):
        gpus = []
        for g in token.gpus or []:
            view = GpuView(
                g.get("uuid", ""), g.get("name", ""), g.get("memory_total_bytes", 0) // MIB
            )
            used_mib, used_compute = 0, 0
            for s in held.get(view.uuid, []):
                view.slices.append(
                    {
                        "pod": f"{s.namespace}/{s.pod_name}",
                        "project": s.project,
                        "organization": s.project.organization.name,
                        "memory_mib": s.memory_limit_bytes // MIB,
                        "compute": s.compute_target_percent,
                    }
                )
                used_mib += s.memory_limit_bytes // MIB
                used_compute += s.compute_target_percent
            for p in products:
                if p.gpu_model.name == view.name:
                    fits = min(
                        (view.memory_total_mib - used_mib) // p.memory_mib,
                        (100 - used_compute) // max(p.compute_percent, 1),
                    )
                    view.free[p.name] = max(0, fits)
            gpus.append(view)
        silent = token.last_seen_at is None or now - token.last_seen_at > agent_late()
        nodes.append(NodeView(token.node_name, token.last_seen_at, silent, gpus))
    return nodes


def alerts(now: datetime | None = None) -> list[Alert]:
    """What support should look at: silent agents, pods pending too long, failed orders."""
    now = now or timezone.now()
    out = []
    for token in NodeToken.objects.filter(revoked_at__isnull=True).order_by("node_name"):
        if token.last_seen_at is None:
            out.append(Alert("agent-silent", f"Agent of {token.node_name} never reported."))
        elif now - token.last_seen_at > agent_late():
            age = (now - token.last_seen_at).total_seconds()
            at = token.last_seen_at.strftime("%H:%M:%S UTC")
            out.append(
                Alert(
                    "agent-silent",
                    f"Agent of {token.node_name} late: last report {age:.0f} s ago (at {at}).",
                )
            )
    out += agent_findings(now)
    out += [
        Alert("slice-idle", f"{s.namespace}/{s.pod}: {s.text}", s.project_id)
        for s in idle.idle_slices(now=now)
    ]
    out += provisioning_alerts()
    for state in PodState.objects.filter(
        phase="Pending", created_at__lt=now - PENDING_TOO_LONG
    ).select_related("project"):
        out.append(
            Alert(
                "pod-pending",
                f"{state.namespace}/{state.name} pending since {state.created_at:%H:%M} UTC: "
                f"{state.words}",
                state.project_id,
            )
        )
    for order in Order.objects.filter(
        state=Order.State.FAILED, updated_at__gte=now - RECENT_FAILURES
    ).select_related("project", "product"):
        out.append(
            Alert(
                "order-failed",
                f"Order {order.pk} ({order.kind} {order.product.name}) of "
                f"{order.project.namespace} failed: {order.failure_message}",
                order.project_id,
            )
        )
    return out


def provisioning_alerts() -> list[Alert]:
    """Provisioning stalled: orders waiting too long, or waiting while the API server does not
    answer (the same checks as `/readyz?scope=controller`)."""
    ok, message = check_backlog()
    out = [] if ok else [Alert("provisioning-delayed", f"Provisioning delayed: {message}.")]
    if Order.objects.filter(state__in=WAITING).exists():
        state = cluster_answers()
        if not state.ok:
            out.append(Alert("cluster-down", f"Orders wait for the cluster: {state.message}."))
    return out


FINDING_WORDS = {
    "backstop-stopped": "Backstop on {node} stopped processes of {where}: {detail}",
    "backstop-throttled": "Backstop on {node} throttled {where}: {detail}",
    "nvml-disagrees": "NVML and the core disagree on {node} for {where}: {detail}",
    "prepare-failed": "Claim {where} failed to prepare on {node}: {detail}",
    kinds.GPU_FAILED: "GPU {where} failed: {detail}",
    kinds.GPU_XID_UNKNOWN: "GPU {where} raised an XID the agent does not know: {detail}",
}


def agent_findings(now: datetime) -> list[Alert]:
    """What node agents found in the last day (newest first), linked to the project of the
    namespace when one owns it."""
    since = (now - RECENT_FAILURES).timestamp()
    found = [
        (f, token.node_name)
        for token in NodeToken.objects.filter(revoked_at__isnull=True)
        for f in token.findings or []
        if f.get("ts", 0) >= since and f.get("kind") in FINDING_WORDS
    ]
    refused = [
        (r, token.node_name)
        for token in NodeToken.objects.filter(revoked_at__isnull=True)
        for r in token.refused_health or []
        if r.get("at", 0) >= since
    ]
    namespaces = {f["namespace"] for f, _ in found}
    projects = dict(Project.objects.filter(namespace__in=namespaces).values_list("namespace", "pk"))
    out = []
    for f, node in sorted(found, key=lambda fn: -fn[0]["ts"]):
        where = f"{f['namespace']}/{f['subject']}" if f["namespace"] != "-" else f["subject"]
        words = FINDING_WORDS[f["kind"]].format(node=node, where=where, detail=f["detail"])
        out.append(Alert(f["kind"], words, projects.get(f["namespace"])))
    # Forged or impossible health reports (portal/agents/health_admission.py): not stored,
    # so no project is linked; support sees the node that sent them.
    for r, node in sorted(refused, key=lambda rn: -rn[0]["at"]):
        where = f"{r['namespace']}/{r['subject']}" if r["namespace"] != "-" else r["subject"]
        words = f"Node {node} reported {r['kind']} {where}, refused: {r['reason']}"
        out.append(Alert("health-refused", words, None))
    return out


def search(text: str, limit: int = 50) -> list[Project]:
    """Projects whose organization, project, namespace or one of whose pods matches `text`."""
    text = text.strip()
    if not text:
        return []
    pods = PodState.objects.filter(name__icontains=text).values("project_id")
    agent_pods = PodSliceStatus.objects.filter(pod_name__icontains=text).values("project_id")
    found = Project.objects.filter(
        Q(name__icontains=text)
        | Q(namespace__icontains=text)
        | Q(organization__name__icontains=text)
        | Q(organization__slug__icontains=text)
        | Q(pk__in=pods)
        | Q(pk__in=agent_pods)
    ).select_related("organization")
    return list(found.order_by("namespace")[:limit])
