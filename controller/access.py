"""Who may reach a project's namespace with kubectl, and with which rights (read from the database).

Read-only. Every active member of the project's organization gets an account named after their
username, id and credential generation (`portal.tenants.naming.account_name`): owners and members
edit, viewers read, and while the organization is suspended owners and members keep reading and
deleting their workloads but create nothing (docs/cluster-access.md).
`members_by_organization` reads the members of any number of organizations in two queries (the
resync reads all of them at once); `accounts` turns one organization's members into accounts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from controller.render.spec import TenantAccount
from portal.access.models import ClusterAccess
from portal.tenants.models import Membership, Project
from portal.tenants.naming import account_name


@dataclass(frozen=True)
class Member:
    """An active member of an organization, as the accounts need them."""

    username: str
    user_id: int
    role: str
    generation: int  # of their cluster credentials (1 until they first download or revoke)


def members_by_organization(
    organization_ids: Iterable[int] | None = None,
) -> dict[int, list[Member]]:
    """Active members of the given organizations (all if None), by username; two queries."""
    memberships = Membership.objects.filter(user__is_active=True)
    if organization_ids is not None:
        memberships = memberships.filter(organization_id__in=list(organization_ids))
    rows = memberships.order_by("user__username").values_list(
        "organization_id", "user__username", "user_id", "role"
    )
    generations = dict(
        ClusterAccess.objects.filter(user_id__in=memberships.values("user_id")).values_list(
            "user_id", "generation"
        )
    )
    members: dict[int, list[Member]] = {}
    for org, username, user_id, role in rows:
        members.setdefault(org, []).append(
            Member(username, user_id, role, generations.get(user_id, 1))
        )
    return members


def accounts(members: Iterable[Member], suspended: bool) -> tuple[TenantAccount, ...]:
    """The cluster account of each member (pure)."""
    result = []
    for m in members:
        if m.role == Membership.Role.VIEWER:
            rights = "view"
        else:
            rights = "suspended" if suspended else "edit"
        name = account_name(m.username, m.user_id, m.generation)
        result.append(TenantAccount(name=name, person=m.username, rights=rights))
    return tuple(result)


def tenant_accounts(project: Project, suspended: bool) -> tuple[TenantAccount, ...]:
    """The accounts of every active member of the project's organization, by username."""
    org = project.organization_id
    return accounts(members_by_organization([org]).get(org, []), suspended)
