"""The ValidatingAdmissionPolicy and binding objects around each policy's CEL.

Every policy fails closed (`failurePolicy: Fail`) and is bound, with `Deny`, to the namespaces
labelled `tranche.dev/tenant: "true"`, so it judges tenant namespaces only.
"""

from __future__ import annotations

from typing import Any

from controller.render.policies import cel
from tranche.claims import platform_labels
from tranche.names import LABEL_TENANT

# How messages name the object under review: "ConfigMap tranche-entitlements".
REQUESTED_OBJECT = cel.concat("request.kind.kind", cel.lit(" "), "request.name")


def render_policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A cluster-wide ValidatingAdmissionPolicy named `name` that fails closed."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": platform_labels()},
        "spec": {"failurePolicy": "Fail", **spec},
    }


def render_binding(policy: str, param_ref: dict[str, Any] | None = None) -> dict[str, Any]:
    """The binding (same name as its policy) that denies in tenant namespaces."""
    spec: dict[str, Any] = {
        "policyName": policy,
        "validationActions": ["Deny"],
        "matchResources": {"namespaceSelector": {"matchLabels": {LABEL_TENANT: "true"}}},
    }
    if param_ref:
        spec["paramRef"] = param_ref
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy, "labels": platform_labels()},
        "spec": spec,
    }


# CEL is stored as plain `str` (not `cel.Expr`) so the objects serialize like any other dict.


def variable(name: str, expression: str) -> dict[str, str]:
    """`variables.<name>`, computed once per request."""
    return {"name": name, "expression": str(expression)}


def match_condition(name: str, expression: str) -> dict[str, str]:
    """The policy only looks at requests for which `expression` holds."""
    return {"name": name, "expression": str(expression)}


def deny_unless(
    expression: str, *, reason: str, message: str | None = None, message_expression: str = ""
) -> dict[str, str]:
    """A validation: the request is refused with `reason` unless `expression` holds."""
    rule = {"expression": str(expression)}
    if message_expression:
        rule["messageExpression"] = str(message_expression)
    else:
        if not message:
            raise ValueError("a refusal must tell the tenant what happened and what to do")
        rule["message"] = message
    rule["reason"] = reason
    return rule
