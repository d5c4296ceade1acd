"""The support console: fleet, alerts and search on one page, for Support staff
(404 for everyone else). Each alert and search hit links to the project's live page."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from portal.agents import gpu_health
from portal.status import fleet, selectors


@login_required
def console(request: HttpRequest) -> HttpResponse:
    if not selectors.is_status_staff(request.user):
        raise Http404("No such page.")
    query = request.GET.get("q", "")[:100]
    context = {
        "nodes": fleet.fleet(),
        "alerts": fleet.alerts(),
        "unhealthy_gpus": gpu_health.unhealthy_gpus(),
        "query": query,
        "found": fleet.search(query),
    }
    return render(request, "status/support_console.html", context)
