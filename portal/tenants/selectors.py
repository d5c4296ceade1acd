"""Reads of tenants, always scoped to the caller's memberships.

An object of another organization is indistinguishable from a missing one: both raise `Http404`.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import QuerySet
from django.http import Http404
from django.utils import timezone

from portal.core.tokens import hash_token
from portal.tenants.models import Invitation, Membership, Project


def memberships_of(user) -> QuerySet[Membership]:
    """The caller's memberships, with their organizations."""
    if not getattr(user, "is_authenticated", False):
        return Membership.objects.none()
    return Membership.objects.filter(user=user).select_related("organization")


def get_membership(user, organization_id: int) -> Membership:
    """The caller's membership in `organization_id`, or 404."""
    found = memberships_of(user).filter(organization_id=organization_id).first()
    if found is None:
        raise Http404("No such organization.")
    return found


def projects_of(user) -> QuerySet[Project]:
    """Projects of every organization the caller belongs to."""
    org_ids = memberships_of(user).values("organization_id")
    return Project.objects.filter(organization_id__in=org_ids).select_related("organization")


def get_project(user, project_id: int) -> tuple[Project, Membership]:
    """The project and the caller's membership in its organization, or 404."""
    project = projects_of(user).filter(pk=project_id).first()
    if project is None:
        raise Http404("No such project.")
    return project, get_membership(user, project.organization_id)


@dataclass(frozen=True)
class TenantFrame:
    """What every tenant page's frame needs, read in two queries: the caller's memberships
    (with organizations) and the live projects of those organizations (organization, name
    order). A project outside them is another tenant's or missing: `project()` says 404."""

    memberships: tuple[Membership, ...]
    projects: tuple[Project, ...]

    def project(self, project_id: int) -> tuple[Project, Membership]:
        """The project and the caller's membership in its organization, or 404."""
        for project in self.projects:
            if project.pk == project_id:
                for membership in self.memberships:
                    if membership.organization_id == project.organization_id:
                        return project, membership
        raise Http404("No such project.")


def tenant_frame(user) -> TenantFrame:
    """The caller's memberships and projects (`TenantFrame`); empty for an anonymous caller."""
    memberships = tuple(memberships_of(user).order_by("organization__name", "organization_id"))
    if not memberships:
        return TenantFrame((), ())
    organizations = {m.organization_id: m.organization for m in memberships}
    projects = tuple(Project.objects.filter(organization_id__in=organizations))
    for project in projects:  # the organizations already read, not a join's copies
        project.organization = organizations[project.organization_id]
    return TenantFrame(memberships, projects)


def members_of(membership: Membership) -> QuerySet[Membership]:
    """Members of the caller's organization."""
    return (
        Membership.objects.filter(organization_id=membership.organization_id)
        .select_related("user")
        .order_by("user__username")
    )


def pending_invitations(membership: Membership) -> QuerySet[Invitation]:
    """Open invitations of the caller's organization (owners only see them)."""
    if membership.role != Membership.Role.OWNER:
        return Invitation.objects.none()
    return Invitation.objects.filter(
        organization_id=membership.organization_id,
        accepted_at__isnull=True,
        expires_at__gt=timezone.now(),
    ).order_by("-created_at")


def get_open_invitation(token: str) -> Invitation:
    """An unaccepted, unexpired invitation by its token (looked up by hash), or 404."""
    found = (
        Invitation.objects.select_related("organization")
        .filter(
            token_hash=hash_token(token[:64]),
            accepted_at__isnull=True,
            expires_at__gt=timezone.now(),
        )
        .first()
    )
    if found is None:
        raise Http404(
            "This invitation link is unknown, expired or was already used. "
            "Ask the organization's owner for a new link."
        )
    return found


def get_opened_invitation(invitation_id: int) -> Invitation:
    """An invitation this session opened with its token (id kept in the session), or 404 once
    it was used or expired."""
    found = (
        Invitation.objects.select_related("organization")
        .filter(pk=invitation_id, accepted_at__isnull=True, expires_at__gt=timezone.now())
        .first()
    )
    if found is None:
        raise Http404(
            "This invitation expired or was already used. "
            "Ask the organization's owner for a new link."
        )
    return found
