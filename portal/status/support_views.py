"""The support console: fleet, alerts and search on one page, for Support staff
(404 for everyone else). Each alert and search hit links to the project's live page.
`gpu_service` is its one write: a GPU out for maintenance or back in service (POST, audited)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal.agents import gpu_health, gpu_service
from portal.status import fleet, selectors

SAID = {
    gpu_service.GpuServiceMark.MAINTENANCE: (
        "GPU {gpu} on {node} is out for maintenance: no new slice is placed on it; the pods "
        "running there keep running until they end."
    ),
    gpu_service.GpuServiceMark.IN_SERVICE: (
        "GPU {gpu} on {node} is back in service: its taints are removed (a failed GPU's once "
        "it answers) and new slices can be placed on it."
    ),
}


@login_required
def console(request: HttpRequest) -> HttpResponse:
    if not selectors.is_status_staff(request.user):
        raise Http404("No such page.")
    query = request.GET.get("q", "")[:100]
    unhealthy = gpu_health.unhealthy_gpus()
    maintenance = gpu_service.in_maintenance()
    context = {
        "nodes": fleet.fleet(),
        "alerts": fleet.alerts(),
        "unhealthy_gpus": unhealthy,
        "in_maintenance": maintenance,
        "maintenance_uuids": {m.gpu for m in maintenance},
        "unhealthy_uuids": {g.uuid for g in unhealthy},
        "query": query,
        "found": fleet.search(query),
    }
    return render(request, "status/support_console.html", context)


@login_required
@require_POST
def gpu_service_action(request: HttpRequest) -> HttpResponse:
    """Mark one GPU out for maintenance or back in service (support staff only)."""
    if not selectors.is_status_staff(request.user):
        raise Http404("No such page.")
    node = request.POST.get("node", "")[:253]
    gpu = request.POST.get("gpu", "")[:64]
    action = request.POST.get("action", "")
    if action not in gpu_service.ACTIONS or not node or not gpu:
        return HttpResponseBadRequest(
            "A GPU action needs node, gpu and action (maintenance or in-service); nothing was "
            "marked. Use the buttons of the support console."
        )
    try:
        gpu_service.set_gpu_service(request.user, node, gpu, action)
    except gpu_service.UnknownGpuError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, SAID[action].format(gpu=gpu, node=node))
    return redirect("support_console")
