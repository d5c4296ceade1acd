"""Who may reach a project's namespace with kubectl, and with which rights (pure).

Every active member of the project's organization (`controller.desired.members_by_organization`
reads them) gets an account named after their username, id and credential generation
(`tranche.naming.account_name`): owners and members edit, viewers read, and while the
organization is suspended owners and members keep reading and deleting their workloads but
create nothing (docs/cluster-access.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from controller.render.spec import TenantAccount
from tranche.names import ROLE_VIEWER
from tranche.naming import account_name


@dataclass(frozen=True)
class Member:
    """An active member of an organization, as the accounts need them."""

    username: str
    user_id: int
    role: str
    generation: int  # of their cluster credentials (1 until they first download or revoke)


def accounts(members: Iterable[Member], suspended: bool) -> tuple[TenantAccount, ...]:
    """The cluster account of each member."""
    result = []
    for m in members:
        edits = "suspended" if suspended else "edit"  # owners and members
        rights = "view" if m.role == ROLE_VIEWER else edits
        name = account_name(m.username, m.user_id, m.generation)
        result.append(TenantAccount(name=name, person=m.username, rights=rights))
    return tuple(result)
