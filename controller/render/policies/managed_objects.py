"""Policy `tranche-managed-objects`: tenants cannot change or delete what Tranche manages.

Objects labelled managed-by Tranche (quota, limit range, entitlements, roles, claim templates,
the default NetworkPolicy)
are refused to anyone but the platform: no delete, no edit of labels or content, no forging the
label on a new object. Updates that leave labels and content alone (e.g. `kubectl apply` of the
documented template, which only touches annotations) are allowed.
"""

from __future__ import annotations

from typing import Any

from controller.render.policies import cel
from controller.render.policies.objects import (
    REQUESTED_OBJECT,
    deny_unless,
    match_condition,
    render_policy,
)
from controller.render.policies.ownership import managed_by_tranche, not_the_platform
from tranche.names import LABEL_MANAGED_BY, MANAGED_BY

NAME = "tranche-managed-objects"
# Fields whose change is an edit; metadata other than labels (annotations, managedFields) is not.
CONTENT_FIELDS = ("metadata.labels", "spec", "data", "rules", "subjects", "roleRef")
OPERATION = "request.operation"


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
                    _any_change("networking.k8s.io", "v1", ["networkpolicies"]),
                ]
            },
            "matchConditions": [
                not_the_platform(platform_users),
                match_condition(
                    "managed-by-tranche",
                    cel.any_of(managed_by_tranche("object"), managed_by_tranche("oldObject")),
                ),
            ],
            "validations": [
                deny_unless(
                    cel.ne(OPERATION, cel.lit("DELETE")),
                    message_expression=cel.message(
                        REQUESTED_OBJECT,
                        " is managed by Tranche from what your organization bought, so it cannot "
                        "be deleted by hand. Change your order in the portal instead.",
                    ),
                    reason="Forbidden",
                ),
                deny_unless(
                    cel.any_of(cel.ne(OPERATION, cel.lit("UPDATE")), cel.group(unchanged)),
                    message_expression=cel.message(
                        REQUESTED_OBJECT,
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
                        REQUESTED_OBJECT,
                        f" carries the label {LABEL_MANAGED_BY}={MANAGED_BY}, which only Tranche "
                        "may set. Remove that label.",
                    ),
                    reason="Forbidden",
                ),
            ],
        },
    )
