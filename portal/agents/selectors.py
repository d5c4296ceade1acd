"""Every read of the agents app."""

from __future__ import annotations

from django.db.models import QuerySet

from portal.agents.models import PodSliceStatus


def pod_status(namespace: str, pod_name: str) -> PodSliceStatus | None:
    """Latest status of one pod (staff/support view and tests); None if never reported."""
    return PodSliceStatus.objects.filter(namespace=namespace, pod_name=pod_name).first()


def project_pod_statuses(project_id: int) -> QuerySet[PodSliceStatus]:
    """Latest statuses of a project's pods, for the project's live page."""
    return PodSliceStatus.objects.filter(project_id=project_id)
