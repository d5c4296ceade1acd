"""Policy 5, `tranche-tenant-accounts`: tenants' cluster accounts stay what the portal made them.

Bound to project namespaces (label `tranche.dev/tenant: "true"`) like policies 1-4:
- a ServiceAccount Tranche manages (a person's account) cannot be edited or deleted by a tenant:
  it would let one member cut off or, with a rebound name, impersonate a colleague;
- tokens (TokenRequest) are minted only for those accounts: the portal's identity may mint in
  every project namespace, and this keeps it from minting for any other ServiceAccount there;
- no tenant may create a Secret of type `kubernetes.io/service-account-token`: kube-controller-
  manager would fill it with a token that never expires, side-stepping the expiry of the tokens
  the portal hands out (workloads get expiring projected tokens without such Secrets).

The platform (system:masters, nodes, kube-system's controllers, the controller's identity and
CONTROLLER_PLATFORM_USERS) is never judged. Kept apart from `policies.py` so each policy module
stays small; the platform test is the same as policy 4's.
"""

from __future__ import annotations

from typing import Any

from controller.render.spec import (
    CONTROLLER_SERVICE_ACCOUNT,
    LABEL_MANAGED_BY,
    LABEL_TENANT,
    MANAGED_BY,
    platform_labels,
)

POLICY = "tranche-tenant-accounts"
ACCOUNT_PREFIX = "u-"  # portal.tenants.naming.account_name
PLATFORM_GROUPS = ("system:masters", "system:nodes")
PLATFORM_USER_PREFIXES = ("system:serviceaccount:kube-system:", "system:kube-")
TOKEN_SECRET_TYPE = "kubernetes.io/service-account-token"  # noqa: S105 (a type name)


def _not_the_platform(platform_users: tuple[str, ...]) -> str:
    groups = "(has(request.userInfo.groups) ? request.userInfo.groups : [])"
    platform = " || ".join(
        [
            f"{groups}.exists(g, g in {list(PLATFORM_GROUPS)})",
            *[f"request.userInfo.username.startsWith('{p}')" for p in PLATFORM_USER_PREFIXES],
            f"request.userInfo.username in {[CONTROLLER_SERVICE_ACCOUNT, *platform_users]}",
        ]
    )
    return f"!({platform})"


def _rule(operations: list[str], resource: str) -> dict[str, Any]:
    return {"apiGroups": [""], "apiVersions": ["v1"], "operations": operations,
            "resources": [resource]}  # fmt: skip


def render_access_policy(platform_users: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The policy and its binding (policy first: the binding refers to it)."""
    managed_old = (
        f"(oldObject != null && has(oldObject.metadata.labels) && "
        f"'{LABEL_MANAGED_BY}' in oldObject.metadata.labels && "
        f"oldObject.metadata.labels['{LABEL_MANAGED_BY}'] == '{MANAGED_BY}')"
    )
    what = "request.kind.kind + ' ' + request.name"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY, "labels": platform_labels()},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    _rule(["UPDATE", "DELETE"], "serviceaccounts"),
                    _rule(["CREATE", "UPDATE"], "secrets"),
                    _rule(["CREATE"], "serviceaccounts/token"),
                ]
            },
            "matchConditions": [
                {"name": "not-the-platform", "expression": _not_the_platform(platform_users)}
            ],
            "validations": [
                {
                    "expression": f"request.resource.resource != 'serviceaccounts' || "
                    f"!{managed_old}",
                    "messageExpression": f"{what} + ' is a person\\'s cluster account, managed "
                    "by Tranche, so it cannot be edited or deleted by hand. To end someone\\'s "
                    "access, remove them from the organization in the portal; to end your own, "
                    "use Revoke my credentials on the Cluster access page.'",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"request.resource.resource != 'secrets' || "
                    f"!has(object.type) || object.type != '{TOKEN_SECRET_TYPE}'",
                    "messageExpression": f"{what} + ' is a Secret of type {TOKEN_SECRET_TYPE}, "
                    "which would hold a token that never expires. Pods get expiring tokens "
                    "automatically; for kubectl, download a kubeconfig from the Cluster access "
                    "page.'",
                    "reason": "Forbidden",
                },
                {
                    "expression": "request.subResource != 'token' || "
                    f"request.name.startsWith('{ACCOUNT_PREFIX}')",
                    "messageExpression": "'Tokens are issued here only for people\\'s cluster "
                    f"accounts ({ACCOUNT_PREFIX}...), not for ' + request.name + '. Pods get "
                    "their ServiceAccount\\'s token automatically.'",
                    "reason": "Forbidden",
                },
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY, "labels": platform_labels()},
        "spec": {
            "policyName": POLICY,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {LABEL_TENANT: "true"}}},
        },
    }
    return [policy, binding]
