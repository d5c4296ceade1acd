"""Reads of tenants, always scoped to the caller's memberships.

An object of another organization is indistinguishable from a missing one: both raise `Http404`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from django.db import connection
from django.db.models import QuerySet
from django.http import Http404
from django.utils import timezone

from portal.core.tokens import hash_token
from portal.tenants.models import Invitation, Membership, Organization, Project


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
    """The caller's memberships and projects (`TenantFrame`); empty for an anonymous caller.

    One SQL statement (memberships, their organizations and those organizations' live
    projects, joined), the rows made into model instances with `from_db`: every tenant page
    reads this, and building two ORM queries cost more CPU than the page's own content."""
    if not getattr(user, "is_authenticated", False):
        return TenantFrame((), ())
    with connection.cursor() as cursor:
        cursor.execute(_frame_sql(), [user.pk])
        rows = cursor.fetchall()
    width = {model: len(model._meta.concrete_fields) for model in _FRAME_MODELS}
    memberships: list[Membership] = []
    projects: list[Project] = []
    organizations: dict[int, Organization] = {}
    for row in rows:
        m_values, rest = row[: width[Membership]], row[width[Membership] :]
        o_values, p_values = rest[: width[Organization]], rest[width[Organization] :]
        organization = organizations.get(o_values[0])
        if organization is None:  # the first row of a membership (rows come by organization)
            organization = Organization.from_db(connection.alias, None, o_values)
            organizations[organization.pk] = organization
            membership = Membership.from_db(connection.alias, None, m_values)
            membership.organization = organization
            memberships.append(membership)
        if p_values[0] is not None:  # an organization without live projects has one row
            project = Project.from_db(connection.alias, None, p_values)
            project.organization = organization
            projects.append(project)
    return TenantFrame(tuple(memberships), tuple(projects))


_FRAME_MODELS = (Membership, Organization, Project)


@functools.cache
def _frame_sql() -> str:
    """Every concrete column of the three models, in field order (what `from_db` takes), and
    projects in their default order (organization name, then name)."""
    columns = ", ".join(
        f'{alias}."{field.column}"'
        for alias, model in zip("mop", _FRAME_MODELS, strict=True)
        for field in model._meta.concrete_fields
    )
    m, o, p = (model._meta.db_table for model in _FRAME_MODELS)
    # names from the models, never input; the user id is a parameter
    joins = (
        f'"{m}" m JOIN "{o}" o ON o."id" = m."organization_id" '
        f'LEFT JOIN "{p}" p ON p."organization_id" = o."id" AND p."deleted_at" IS NULL'
    )
    order = 'o."name", o."id", p."name", p."id"'
    return f'SELECT {columns} FROM {joins} WHERE m."user_id" = %s ORDER BY {order}'  # noqa: S608


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
