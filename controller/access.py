"""Who may reach a project's namespace with kubectl, and with which rights (read from the database).

Read-only. Every active member of the project's organization gets an account named after their
username, id and credential generation (`portal.tenants.naming.account_name`): owners and members
edit, viewers read, and while the organization is suspended owners and members keep reading and
deleting their workloads but create nothing (docs/cluster-access.md).
"""

from __future__ import annotations

from controller.render.spec import TenantAccount
from portal.access.models import ClusterAccess
from portal.tenants.models import Membership, Project
from portal.tenants.naming import account_name


def tenant_accounts(project: Project, suspended: bool) -> tuple[TenantAccount, ...]:
    """The accounts of every active member of the project's organization, by username."""
    members = (
        Membership.objects.filter(organization_id=project.organization_id, user__is_active=True)
        .select_related("user")
        .order_by("user__username")
    )
    generations = dict(
        ClusterAccess.objects.filter(
            user__membership__organization_id=project.organization_id
        ).values_list("user_id", "generation")
    )
    accounts = []
    for m in members:
        if m.role == Membership.Role.VIEWER:
            rights = "view"
        else:
            rights = "suspended" if suspended else "edit"
        name = account_name(m.user.username, m.user_id, generations.get(m.user_id, 1))
        accounts.append(TenantAccount(name=name, person=m.user.username, rights=rights))
    return tuple(accounts)
