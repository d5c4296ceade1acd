"""The frame every tenant page shares: the caller's organizations and projects, the current
project, and the navigation's links.

A request reads the frame once (`frame_of`: two queries, kept on the request), and the
project a page is about comes from it (`request_project`), so a tenant page's project,
membership and navigation cost those two queries together. The navigation's URLs are reversed
once per project and process (`project_links`), not by a `{% url %}` tag per link and request.
"""

from __future__ import annotations

import functools
from typing import Any

from django.http import HttpRequest
from django.urls import get_script_prefix, reverse

from portal.tenants.models import Membership, Project
from portal.tenants.selectors import TenantFrame, tenant_frame

SESSION_PROJECT = "tranche_project_id"
_FRAME = "_tranche_frame"
# the main navigation's links to the current project's pages, in the order shown
PROJECT_PAGES = (
    ("quota", "Quota"),
    ("project_status", "Live status"),
    ("order_form", "Order"),
    ("order_list", "Orders"),
    ("preflight", "Pre-flight"),
)


def frame_of(request: HttpRequest) -> TenantFrame:
    """The caller's memberships and projects, read on the request's first use."""
    frame = getattr(request, _FRAME, None)
    if frame is None:
        frame = tenant_frame(request.user)
        setattr(request, _FRAME, frame)
    return frame


def request_project(request: HttpRequest, project_id: int) -> tuple[Project, Membership]:
    """The caller's project `project_id` and membership in its organization, or 404 (another
    tenant's project is indistinguishable from a missing one)."""
    return frame_of(request).project(project_id)


def current_project(request: HttpRequest) -> Project | None:
    """The project chosen in the session (if still visible), else the caller's first project."""
    projects = frame_of(request).projects
    chosen = request.session.get(SESSION_PROJECT)
    found = next((p for p in projects if p.pk == chosen), None) if isinstance(chosen, int) else None
    return found or (projects[0] if projects else None)


@functools.lru_cache(maxsize=4096)
def _project_links(prefix: str, project_id: int) -> tuple[tuple[str, str], ...]:
    return tuple((label, reverse(name, args=[project_id])) for name, label in PROJECT_PAGES)


def project_links(project_id: int) -> tuple[tuple[str, str], ...]:
    """(label, URL) of the project's pages in the main navigation."""
    return _project_links(get_script_prefix(), project_id)


@functools.lru_cache(maxsize=4096)
def _organization_link(prefix: str, organization_id: int) -> str:
    return reverse("organization", args=[organization_id])


def nav_context(request: HttpRequest, project: Project | None = None) -> dict[str, Any]:
    """Context for the base layout's navigation and organization/project switcher."""
    if not request.user.is_authenticated:
        return {}
    if project is not None and request.session.get(SESSION_PROJECT) != project.pk:
        # Only a change is written: assigning marks the session modified, and every page view
        # would then UPDATE the session row (a write and a transaction per page).
        request.session[SESSION_PROJECT] = project.pk
    frame = frame_of(request)
    nav_project = project or current_project(request)
    prefix = get_script_prefix()
    return {
        "nav_memberships": frame.memberships,
        "nav_organization_links": [
            (m.organization, _organization_link(prefix, m.organization_id))
            for m in frame.memberships
        ],
        "nav_projects": frame.projects,
        "nav_project": nav_project,
        "nav_project_links": project_links(nav_project.pk) if nav_project else (),
    }
