"""Navigation context shared by tenant pages: organizations, projects, the current project."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from portal.tenants.models import Project
from portal.tenants.selectors import memberships_of, projects_of

SESSION_PROJECT = "tranche_project_id"


def current_project(request: HttpRequest) -> Project | None:
    """The project chosen in the session (if still visible), else the caller's first project."""
    projects = projects_of(request.user)
    chosen = request.session.get(SESSION_PROJECT)
    found = projects.filter(pk=chosen).first() if isinstance(chosen, int) else None
    return found or projects.first()


def nav_context(request: HttpRequest, project: Project | None = None) -> dict[str, Any]:
    """Context for the base layout's organization/project switcher."""
    if not request.user.is_authenticated:
        return {}
    if project is not None and request.session.get(SESSION_PROJECT) != project.pk:
        # Only a change is written: assigning marks the session modified, and every page view
        # would then UPDATE the session row (a write and a transaction per page).
        request.session[SESSION_PROJECT] = project.pk
    return {
        "nav_memberships": memberships_of(request.user),
        "nav_projects": projects_of(request.user),
        "nav_project": project or current_project(request),
    }
