"""What belongs to the platform: the identities never judged as tenants, and the objects it
manages (labelled managed-by Tranche). Policies 4 and 5 share both tests."""

from __future__ import annotations

from controller.render.policies import cel
from controller.render.policies.objects import match_condition
from tranche.names import CONTROLLER_SERVICE_ACCOUNT, LABEL_MANAGED_BY, MANAGED_BY

# Identities that act for the platform: API server/controller-manager/scheduler, nodes,
# kube-system's controllers, the controller's own identity and CONTROLLER_PLATFORM_USERS.
PLATFORM_GROUPS = ("system:masters", "system:nodes")
PLATFORM_USER_PREFIXES = ("system:serviceaccount:kube-system:", "system:kube-")


def is_platform(platform_users: tuple[str, ...]) -> cel.Expr:
    """The request comes from the platform, not from a tenant."""
    groups = cel.or_default("request.userInfo.groups", "[]")
    username = "request.userInfo.username"
    return cel.any_of(
        cel.exists(groups, "g", cel.in_("g", cel.str_list(PLATFORM_GROUPS))),
        cel.starts_with_any(username, PLATFORM_USER_PREFIXES),
        cel.in_(username, cel.str_list([CONTROLLER_SERVICE_ACCOUNT, *platform_users])),
    )


def not_the_platform(platform_users: tuple[str, ...]) -> dict[str, str]:
    """Match condition: the policy judges tenants only."""
    return match_condition("not-the-platform", cel.not_(cel.group(is_platform(platform_users))))


def managed_by_tranche(obj: str) -> cel.Expr:
    """`obj` (`object` or `oldObject`) exists and carries the managed-by Tranche label."""
    labels = f"{obj}.metadata.labels"
    key = cel.lit(LABEL_MANAGED_BY)
    return cel.group(
        cel.all_of(
            cel.ne(obj, "null"),
            cel.has(labels),
            cel.in_(key, labels),
            cel.eq(cel.index(labels, key), cel.lit(MANAGED_BY)),
        )
    )
