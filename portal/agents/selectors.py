"""Every read of the agents app."""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet
from django.db.models.expressions import RawSQL

from portal.agents.models import NodeToken, PodSliceStatus


def pod_status(namespace: str, pod_name: str) -> PodSliceStatus | None:
    """Latest status of one pod (staff/support view and tests); None if never reported."""
    return PodSliceStatus.objects.filter(namespace=namespace, pod_name=pod_name).first()


# The model of the pod's GPU as its node's agent last listed it (NodeToken.gpus), read in the same
# query as the pods: the live page's query count does not grow with the GPU column.
_GPU_NAME = RawSQL(
    "SELECT g->>'name' FROM agents_nodetoken t, jsonb_array_elements(CASE WHEN "
    "jsonb_typeof(t.gpus) = 'array' THEN t.gpus ELSE '[]'::jsonb END) g "
    "WHERE t.node_name = agents_podslicestatus.node_name "
    "AND g->>'uuid' = agents_podslicestatus.gpu_uuid LIMIT 1",
    [],
)


def project_pod_statuses(project_id: int) -> QuerySet[PodSliceStatus]:
    """Latest statuses of a project's pods, for the project's live page (each with `gpu_name`:
    its GPU's model as the node's agent reported it, or None)."""
    return PodSliceStatus.objects.filter(project_id=project_id).annotate(gpu_name=_GPU_NAME)


def silent_nodes_line(cutoff: datetime) -> str:
    """For /readyz: node agents that reported before but not since `cutoff` (token live)."""
    nodes = sorted(
        NodeToken.objects.filter(
            revoked_at__isnull=True, last_seen_at__isnull=False, last_seen_at__lt=cutoff
        ).values_list("node_name", flat=True)
    )
    return "node agents silent: " + ", ".join(nodes) if nodes else ""


def measured_context_bytes() -> dict[str, int]:
    """GPU model name -> device memory one CUDA context took on it, as node agents measured it
    (the most any live agent reported: the core charges each its own node's figure)."""
    out: dict[str, int] = {}
    for gpus in NodeToken.objects.filter(revoked_at__isnull=True).values_list("gpus", flat=True):
        for gpu in gpus if isinstance(gpus, list) else []:
            measured = gpu.get("context_bytes") if isinstance(gpu, dict) else None
            if isinstance(measured, int) and measured > 0:
                name = str(gpu.get("name", ""))
                out[name] = max(out.get(name, 0), measured)
    return out
