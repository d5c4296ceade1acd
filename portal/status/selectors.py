"""Every read of the live status pages, scoped to the caller.

Who may watch a project: any member (any role) of its organization, active staff users in the
"Support" group, and superusers (every project). Billing staff work on invoices, prices and
organizations in the admin and billing pages; they see no live page or support console (least
privilege). Anyone else gets `Http404`, so another organization's project is indistinguishable
from a missing one. The page and the websocket consumer use the same rule (`watchable_projects`).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.http import Http404

from portal.agents.rows import FIELDS, LiveRow, pod_row
from portal.agents.selectors import project_pod_statuses
from portal.cluster.models import PodState, QuotaUse
from portal.cluster.services import row_name
from portal.core import figures
from portal.orders import selectors as orders
from portal.orders.selectors import QuotaLine
from portal.status.warnings import raw_text, summary_text
from portal.tenants.models import Project
from portal.tenants.selectors import projects_of
from tranche.pod_reasons import CPU_QUOTA, MEMORY_QUOTA

# names among the project's figures (`portal.core.figures`)
QUOTA_USE = "quota_use"
QUOTA_WAITS = "quota_waits"

STAFF_GROUPS = ("Support",)
# The table's shape lives with the rows (portal.agents.rows); the page reads it from here.
__all__ = ["FIELDS", "LiveRow", "pod_row"]


def is_status_staff(user) -> bool:
    """Superusers, and staff in the Support group, see every project's status."""
    if not (getattr(user, "is_authenticated", False) and user.is_active):
        return False
    if user.is_superuser:
        return True
    return user.is_staff and user.groups.filter(name__in=STAFF_GROUPS).exists()


def watchable_projects(user) -> QuerySet[Project]:
    """Projects whose live status `user` may watch."""
    if not (getattr(user, "is_authenticated", False) and user.is_active):
        return Project.objects.none()
    if is_status_staff(user):
        return Project.objects.select_related("organization")
    return projects_of(user)


def get_watched_project(user, project_id: int) -> Project:
    """The project if `user` may watch it, else 404."""
    project = watchable_projects(user).filter(pk=project_id).first()
    if project is None:
        raise Http404("No such project.")
    return project


def can_watch(user_id: int | None, project_id: int) -> bool:
    """Fresh permission check for a long-lived socket: the user is re-read from the database,
    so a removed membership, a dropped group or a deactivated account counts at once."""
    user = get_user_model().objects.filter(pk=user_id).first() if user_id else None
    return user is not None and watchable_projects(user).filter(pk=project_id).exists()


def pod_rows(project_id: int, statuses: list | None = None) -> list[LiveRow]:
    """Every pod of a project the caller was already allowed to watch (`get_watched_project`
    or `can_watch`); `statuses`: its `project_pod_statuses` rows when read already."""
    return [
        pod_row(s) for s in (project_pod_statuses(project_id) if statuses is None else statuses)
    ]


# The cluster's view of every pod (and refused workload): what Kubernetes says, in words.
CLUSTER_FIELDS = (
    ("pod", "Pod"),
    ("phase", "Phase"),
    ("reason", "What is happening / next step"),
    ("events", "Recent warnings"),
)


def cluster_row(state: PodState) -> LiveRow:
    """The classifier's words first; the warnings one line per reason (`status.warnings`)."""
    name = row_name(state.kind, state.name)
    words = state.words + (f" Next: {state.next_step}" if state.next_step else "")
    cells = {"pod": name, "phase": state.phase, "reason": words,
             "events": summary_text(state.events)}  # fmt: skip
    return LiveRow(
        key=f"{state.namespace}/{name}",
        cells=cells,
        fields=CLUSTER_FIELDS,
        reason=state.reason,
        raw=raw_text(state.events),
    )


def cluster_rows(project_id: int) -> list[LiveRow]:
    """Every pod the cluster knows in the project (the caller may already watch it)."""
    return [cluster_row(s) for s in PodState.objects.filter(project_id=project_id)]


def live_cluster_row(project_id: int, namespace: str, name: str) -> LiveRow | None:
    """One row as stored now (`name` as the table shows it); None once it is gone."""
    kind, _, plain = name.rpartition("/") if "/" in name else ("Pod", "", name)
    state = PodState.objects.filter(
        project_id=project_id, namespace=namespace, kind=kind, name=plain
    ).first()
    return cluster_row(state) if state else None


def quota_waits(project: Project) -> list[PodState]:
    """Pods and workloads of the project held back by its CPU or RAM quota now (the quota
    page's banner: a GPU workload can wait on CPU/RAM while its GPU slice is free). Kept per
    project until a writer says it changed (`portal.core.figures`)."""
    return figures.cached(project, QUOTA_WAITS, lambda: _quota_waits(project))


def _quota_waits(project: Project) -> list[PodState]:
    reasons = (CPU_QUOTA, MEMORY_QUOTA)
    return list(PodState.objects.filter(project_id=project.pk, reason__in=reasons)[:5])


def node_reports(project_id: int) -> dict[str, float]:
    """Node -> when its agent last reported (epoch seconds), for the nodes the project's rows
    are on: the live page marks a node's rows stale from it (stale.js)."""
    from portal.agents.models import NodeToken, PodSliceStatus

    nodes = PodSliceStatus.objects.filter(project_id=project_id).values("node_name")
    return {
        name: seen.timestamp()
        for name, seen in NodeToken.objects.filter(
            node_name__in=nodes, last_seen_at__isnull=False
        ).values_list("node_name", "last_seen_at")
    }


def quota_use(project: Project) -> QuotaUse | None:
    """The project's CPU/RAM use as its quota last reported it; None until the watcher saw it.
    Kept until the watcher's next change of it (`portal.core.figures`)."""
    return figures.cached(project, QUOTA_USE, lambda: _quota_use(project))


def _quota_use(project: Project) -> QuotaUse | None:
    return QuotaUse.objects.filter(project_id=project.pk).first()


def quota_figures(project: Project) -> tuple[QuotaUse | None, list[QuotaLine], list[PodState]]:
    """The quota page's figures, `quota_use`, `orders.quota_lines` and `quota_waits`, in one
    read of the project's figures (`figures.cached_many`: two Redis round trips, not six)."""
    values = figures.cached_many(
        project,
        {
            QUOTA_USE: lambda _values: _quota_use(project),
            orders.QUOTA_LINES: lambda v: orders.compute_quota_lines(project, v[QUOTA_USE]),
            QUOTA_WAITS: lambda _values: _quota_waits(project),
        },
    )
    return values[QUOTA_USE], values[orders.QUOTA_LINES], values[QUOTA_WAITS]
