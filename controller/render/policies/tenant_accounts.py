"""Policy 5, `tranche-tenant-accounts`: tenants' cluster accounts stay what the portal made them.

- a ServiceAccount Tranche manages (a person's account) cannot be edited or deleted by a tenant:
  it would let one member cut off or, with a rebound name, impersonate a colleague;
- no tenant may create a ServiceAccount named like a person's account (`u-...`) or carrying the
  managed-by label: a member could otherwise create a colleague's *next* account name (the one
  a revocation makes) and hold its identity once the controller binds it;
- tokens (TokenRequest) are minted only for those accounts: the portal's identity may mint in
  every project namespace, and this keeps it from minting for any other ServiceAccount there;
- no tenant may create a Secret of type `kubernetes.io/service-account-token`: kube-controller-
  manager would fill it with a token that never expires, side-stepping the expiry of the tokens
  the portal hands out (workloads get expiring projected tokens without such Secrets).

The platform (`ownership.is_platform`, the same test as policy 4's) is never judged.
"""

from __future__ import annotations

from typing import Any

from controller.render.policies import cel
from controller.render.policies.objects import (
    REQUESTED_OBJECT,
    deny_unless,
    render_binding,
    render_policy,
)
from controller.render.policies.ownership import managed_by_tranche, not_the_platform
from tranche.names import ACCOUNT_PREFIX, LABEL_MANAGED_BY, MANAGED_BY

NAME = "tranche-tenant-accounts"
TOKEN_SECRET_TYPE = "kubernetes.io/service-account-token"  # noqa: S105 (a type name)
RESOURCE = "request.resource.resource"
NEW_NAME_FIELDS = ("object.metadata.name", "object.metadata.generateName")


def _reserved_account_name() -> cel.Expr:
    """The new object's name (or generateName) starts with the people's account prefix."""
    return cel.group(
        cel.any_of(
            *(
                cel.group(
                    cel.all_of(cel.has(f), cel.call(f, "startsWith", cel.lit(ACCOUNT_PREFIX)))
                )
                for f in NEW_NAME_FIELDS
            )
        )
    )


def _rule(operations: list[str], resource: str) -> dict[str, Any]:
    return {"apiGroups": [""], "apiVersions": ["v1"], "operations": operations,
            "resources": [resource]}  # fmt: skip


def render_access_policy(platform_users: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The policy and its binding (policy first: the binding refers to it)."""
    policy = render_policy(
        NAME,
        {
            "matchConstraints": {
                "resourceRules": [
                    _rule(["CREATE", "UPDATE", "DELETE"], "serviceaccounts"),
                    _rule(["CREATE", "UPDATE"], "secrets"),
                    _rule(["CREATE"], "serviceaccounts/token"),
                ]
            },
            "matchConditions": [not_the_platform(platform_users)],
            "validations": [
                deny_unless(
                    cel.any_of(
                        cel.ne(RESOURCE, cel.lit("serviceaccounts")),
                        cel.not_(managed_by_tranche("oldObject")),
                    ),
                    message_expression=cel.message(
                        REQUESTED_OBJECT,
                        " is a person's cluster account, managed by Tranche, so it cannot be "
                        "edited or deleted by hand. To end someone's access, remove them from the "
                        "organization in the portal; to end your own, use Revoke my credentials "
                        "on the Cluster access page.",
                    ),
                    reason="Forbidden",
                ),
                deny_unless(
                    cel.any_of(
                        cel.ne(RESOURCE, cel.lit("serviceaccounts")),
                        cel.ne("request.operation", cel.lit("CREATE")),
                        cel.has("request.subResource"),  # a TokenRequest: judged below
                        cel.not_(_reserved_account_name()),
                    ),
                    message_expression=cel.message(
                        f"ServiceAccount names starting with {ACCOUNT_PREFIX} are reserved for the "
                        "cluster accounts Tranche makes for the people of your organization, so ",
                        cel.Expr("request.name"),
                        " cannot be created by hand. Choose a name that does not start with "
                        f"{ACCOUNT_PREFIX} (e.g. app-runner).",
                    ),
                    reason="Forbidden",
                ),
                deny_unless(
                    cel.any_of(
                        cel.ne(RESOURCE, cel.lit("serviceaccounts")),
                        cel.ne("request.operation", cel.lit("CREATE")),
                        cel.has("request.subResource"),  # a TokenRequest: judged below
                        cel.not_(managed_by_tranche("object")),
                    ),
                    message_expression=cel.message(
                        REQUESTED_OBJECT,
                        f" carries the label {LABEL_MANAGED_BY}={MANAGED_BY}, which only Tranche "
                        "may set. Remove that label.",
                    ),
                    reason="Forbidden",
                ),
                deny_unless(
                    cel.any_of(
                        cel.ne(RESOURCE, cel.lit("secrets")),
                        cel.not_(cel.has("object.type")),
                        cel.ne("object.type", cel.lit(TOKEN_SECRET_TYPE)),
                    ),
                    message_expression=cel.message(
                        REQUESTED_OBJECT,
                        f" is a Secret of type {TOKEN_SECRET_TYPE}, which would hold a token that "
                        "never expires. Pods get expiring tokens automatically; for kubectl, "
                        "download a kubeconfig from the Cluster access page.",
                    ),
                    reason="Forbidden",
                ),
                deny_unless(
                    # a request for the object itself has no subResource at all: reading it
                    # unguarded is an error, which fails closed (every Secret refused)
                    cel.any_of(
                        cel.not_(cel.has("request.subResource")),
                        cel.ne("request.subResource", cel.lit("token")),
                        cel.call("request.name", "startsWith", cel.lit(ACCOUNT_PREFIX)),
                    ),
                    message_expression=cel.message(
                        "Tokens are issued here only for people's cluster accounts "
                        f"({ACCOUNT_PREFIX}...), not for ",
                        cel.Expr("request.name"),
                        ". Pods get their ServiceAccount's token automatically.",
                    ),
                    reason="Forbidden",
                ),
            ],
        },
    )
    return [policy, render_binding(NAME)]
