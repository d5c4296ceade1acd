"""The quota page: entitled, in use and pending slices per product (`orders.selectors`), CPU and
RAM quota with headroom, and what the cluster says holds a workload back on CPU/RAM
(`status.selectors.quota_waits`), linked to the live page that explains it. It lives with the
status pages because it reads both the orders and the cluster's view (apps are layered:
status > orders); so does its template, `status/quota.html`."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from portal.status import selectors
from portal.tenants.context import nav_context, request_project


@login_required
def quota(request: HttpRequest, project_id: int) -> HttpResponse:
    """Entitled, allocated and pending slices per product, plus CPU/RAM quota and headroom."""
    project, membership = request_project(request, project_id)
    used, lines, waits = selectors.quota_figures(project)
    cpu_headroom = mem_headroom = None
    if used is not None:
        cpu_headroom = max(0, project.cpu_quota_millicores - used.cpu_used_millicores)
        mem_headroom = max(0, project.memory_quota_mib - used.memory_used_mib)
    context = {
        "project": project,
        "used": used,
        "membership": membership,
        "lines": lines,
        # a message a product's subscription carries while it is not ready (e.g. a cancel
        # waiting for its pods), said once above the table, not repeated in its cells
        "notes": [
            (line.product.name, line.not_ready_message) for line in lines if line.not_ready_message
        ],
        "waits": waits,
        "cpu_headroom": cpu_headroom,
        "mem_headroom": mem_headroom,
        **nav_context(request, project),
    }
    return render(request, "status/quota.html", context)
