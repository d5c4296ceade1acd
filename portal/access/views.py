"""The Cluster access page: what the user can reach, download a kubeconfig, revoke credentials."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from portal.access import services
from portal.access.models import ClusterAccess
from portal.tenants.context import nav_context
from portal.tenants.errors import ServiceError
from portal.tenants.models import Membership
from portal.tenants.selectors import memberships_of, projects_of

RIGHTS = {
    "edit": "create, change and delete workloads and claims; read events, logs and quota",
    "view": "read only: pods, workloads, claims, events, logs and quota (no secrets)",
    "suspended": "read, and delete your workloads; nothing new can be created while your "
    "organization is suspended",
}


def _rows(user) -> list[dict]:
    roles = {m.organization_id: m for m in memberships_of(user)}
    rows = []
    for project in projects_of(user).order_by("organization__slug", "slug"):
        membership = roles[project.organization_id]
        if membership.role == Membership.Role.VIEWER:
            rights = "view"
        elif project.organization.is_suspended:
            rights = "suspended"
        else:
            rights = "edit"
        rows.append({
            "project": project,
            "role": membership.get_role_display(),
            "rights": RIGHTS[rights],
            "suspended": project.organization.is_suspended,
            "context": services.context_name(project),
        })  # fmt: skip
    return rows


@login_required
@never_cache
def cluster_access(request: HttpRequest) -> HttpResponse:
    """Projects the user can reach with kubectl, the download and revoke actions."""
    access = ClusterAccess.objects.filter(user=request.user).first()
    rows = _rows(request.user)
    context = {
        "rows": rows,
        "access": access,
        "ttl_hours": round(settings.CLUSTER_ACCESS_TTL_SECONDS / 3600, 2),
        "filename": f"tranche-{request.user.get_username()}.kubeconfig",
        "any_suspended": any(r["suspended"] for r in rows),
        **nav_context(request),
    }
    return render(request, "access/cluster_access.html", context)


@login_required
@require_POST
def download_kubeconfig(request: HttpRequest) -> HttpResponse:
    """Mint the tokens and send the kubeconfig as a file (never cached, never stored)."""
    try:
        issued = services.issue_kubeconfig(request.user)
    except ServiceError as error:
        messages.error(request, str(error))
        return redirect("cluster_access")
    response = HttpResponse(issued.text, content_type="application/yaml; charset=utf-8")
    filename = f"tranche-{request.user.get_username()}.kubeconfig"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "no-store"
    response["X-Tranche-Contexts"] = ",".join(issued.contexts)
    if issued.not_ready:
        waiting = [services.context_name(p) for p in issued.not_ready]
        response["X-Tranche-Not-Ready"] = ",".join(waiting)
    return response


@login_required
def revoke(request: HttpRequest) -> HttpResponse:
    """GET: what revoking does (a confirmation page). POST: invalidate every kubeconfig this
    user downloaded."""
    if request.method != "POST":
        context = {"projects": projects_of(request.user), **nav_context(request)}
        return render(request, "access/revoke_confirm.html", context)
    services.revoke_credentials(request.user)
    messages.success(
        request,
        "Your cluster credentials are revoked: every kubeconfig you downloaded before stops "
        "working within seconds. Download a new one to keep working.",
    )
    return redirect("cluster_access")
