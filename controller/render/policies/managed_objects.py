"""Policy `tranche-managed-objects`: tenants cannot change or delete what Tranche manages.

Objects labelled managed-by Tranche (quota, limit range, entitlements, roles, claim templates)
are refused to anyone but the platform: no delete, no edit of labels or content, no forging the
label on a new object. Updates that leave labels and content alone (e.g. `kubectl apply` of the
documented template, which only touches annotations) are allowed.
"""

from __future__ import annotations

from typing import Any

from controller.render.policies import cel
from controller.render.policies.objects import deny_unless, match_condition, render_policy
from controller.render.spec import CONTROLLER_SERVICE_ACCOUNT, LABEL_MANAGED_BY, MANAGED_BY

NAME = "tranche-managed-objects"
# Identities that act for the platform and are never judged as tenants by this policy.
PLATFORM_GROUPS = ("system:masters", "system:nodes")
PLATFORM_USER_PREFIXES = ("system:serviceaccount:kube-system:", "system:kube-")
# Fields whose change is an edit; metadata other than labels (annotations, managedFields) is not.
CONTENT_FIELDS = ("metadata.labels", "spec", "data", "rules", "subjects", "roleRef")
WHAT = cel.concat("request.kind.kind", cel.lit(" "), "request.name")
OPERATION = "request.operation"


def _is_platform(platform_users: tuple[str, ...]) -> cel.Expr:
    groups = cel.or_default("request.userInfo.groups", "[]")
    username = "request.userInfo.username"
    return cel.any_of(
        cel.exists(groups, "g", cel.in_("g", cel.str_list(PLATFORM_GROUPS))),
        cel.starts_with_any(username, PLATFORM_USER_PREFIXES),
        cel.in_(username, cel.str_list([CONTROLLER_SERVICE_ACCOUNT, *platform_users])),
    )


def _managed(obj: str) -> cel.Expr:
    """`obj` exists and carries the managed-by Tranche label."""
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


def _unchanged(field: str) -> cel.Expr:
    new, old = f"object.{field}", f"oldObject.{field}"
    return cel.group(
        cel.all_of(
            cel.eq(cel.has(new), cel.has(old)),
            cel.group(cel.any_of(cel.not_(cel.has(new)), cel.eq(new, old))),
        )
    )


def _any_change(group: str, version: str, resources: list[str]) -> dict[str, Any]:
    return {
        "apiGroups": [group],
        "apiVersions": [version],
        "operations": ["CREATE", "UPDATE", "DELETE"],
        "resources": resources,
    }


def render_managed_policy(platform_users: tuple[str, ...] = ()) -> dict[str, Any]:
    """Tenants cannot delete, edit or impersonate objects Tranche manages."""
    unchanged = cel.all_of(*(_unchanged(f) for f in CONTENT_FIELDS))
    return render_policy(
        NAME,
        {
            "matchConstraints": {
                "resourceRules": [
                    _any_change("", "v1", ["configmaps", "resourcequotas", "limitranges"]),
                    _any_change("rbac.authorization.k8s.io", "v1", ["roles", "rolebindings"]),
                    _any_change("resource.k8s.io", "*", ["resourceclaimtemplates"]),
                ]
            },
            "matchConditions": [
                match_condition(
                    "not-the-platform", cel.not_(cel.group(_is_platform(platform_users)))
                ),
                match_condition(
                    "managed-by-tranche", cel.any_of(_managed("object"), _managed("oldObject"))
                ),
            ],
            "validations": [
                deny_unless(
                    cel.ne(OPERATION, cel.lit("DELETE")),
                    message_expression=cel.message(
                        WHAT,
                        " is managed by Tranche from what your organization bought, so it cannot "
                        "be deleted by hand. Change your order in the portal instead.",
                    ),
                    reason="Forbidden",
                ),
                deny_unless(
                    cel.any_of(cel.ne(OPERATION, cel.lit("UPDATE")), cel.group(unchanged)),
                    message_expression=cel.message(
                        WHAT,
                        " is managed by Tranche from what your organization bought, so it cannot "
                        "be edited by hand (any change would be reverted). Change your order in "
                        "the portal instead.",
                    ),
                    reason="Forbidden",
                ),
                deny_unless(
                    cel.any_of(
                        cel.ne(OPERATION, cel.lit("CREATE")),
                        cel.eq("request.resource.resource", cel.lit("resourceclaimtemplates")),
                    ),
                    message_expression=cel.message(
                        WHAT,
                        f" carries the label {LABEL_MANAGED_BY}={MANAGED_BY}, which only Tranche "
                        "may set. Remove that label.",
                    ),
                    reason="Forbidden",
                ),
            ],
        },
    )
