"""The live status page of a project: rendered from the database, then kept live by status.js."""

from __future__ import annotations

import json
import time

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from portal.agents import gpu_health
from portal.status import charts, idle, selectors
from portal.tenants.context import nav_context


@login_required
def project_status(request: HttpRequest, project_id: int) -> HttpResponse:
    """Latest slice figures of every pod of the project (404 unless the caller may watch it)."""
    project = selectors.get_watched_project(request.user, project_id)
    statuses = list(selectors.project_pod_statuses(project.pk))  # the table and idle slices
    rows = selectors.pod_rows(project.pk, statuses)
    chart_data = charts.live_charts(project.pk)
    live = {row.cells["pod"] for row in rows}
    pods = sorted(chart_data["pods"])
    context = {
        "project": project,
        "fields": selectors.FIELDS,
        "rows": rows,
        "cluster_fields": selectors.CLUSTER_FIELDS,
        "cluster_rows": selectors.cluster_rows(project.pk),
        "chart_data": chart_data,
        # pods with history that no agent reports now are folded away under their own heading
        "charted_pods": [p for p in pods if p in live],
        "gone_pods": [p for p in pods if p not in live],
        "node_seen": json.dumps(selectors.node_reports(project.pk)),
        "gpu_events": gpu_health.project_events(project.pk),
        "idle_slices": idle.idle_slices(project.pk, statuses=statuses),
        "server_now": time.time(),
        "late_after": settings.AGENT_LATE_SECONDS,
        **nav_context(request, project),
    }
    return render(request, "status/project_status.html", context)
