"""Every read of the agents app."""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet

from portal.agents.models import NodeToken, PodSliceStatus


def pod_status(namespace: str, pod_name: str) -> PodSliceStatus | None:
    """Latest status of one pod (staff/support view and tests); None if never reported."""
    return PodSliceStatus.objects.filter(namespace=namespace, pod_name=pod_name).first()


def project_pod_statuses(project_id: int) -> QuerySet[PodSliceStatus]:
    """Latest statuses of a project's pods, for the project's live page."""
    return PodSliceStatus.objects.filter(project_id=project_id)


def silent_nodes_line(cutoff: datetime) -> str:
    """For /readyz: node agents that reported before but not since `cutoff` (token live)."""
    nodes = sorted(
        NodeToken.objects.filter(
            revoked_at__isnull=True, last_seen_at__isnull=False, last_seen_at__lt=cutoff
        ).values_list("node_name", flat=True)
    )
    return "node agents silent: " + ", ".join(nodes) if nodes else ""
