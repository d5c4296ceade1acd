"""Policy `tranche-claim-form`: claims and templates only in the documented form.

A ResourceClaim or ResourceClaimTemplate must ask for one device (`exactly`, count 1) of a
DeviceClass sold to the project, with exactly that product's capacity and nothing that picks a
device by other means. What is sold is the namespace's `tranche-entitlements` ConfigMap (the
policy's parameter: `<class>.memory` / `<class>.cores` keys). Templates must also carry the
project's labels and be named like their class.
"""

from __future__ import annotations

from typing import Any

from controller.render.policies import cel
from controller.render.policies.objects import (
    deny_unless,
    match_condition,
    render_policy,
    variable,
)
from tranche.names import (
    CLAIM_REQUEST_NAME,
    LABEL_MANAGED_BY,
    LABEL_ORGANIZATION,
    LABEL_PROJECT,
    MANAGED_BY,
)

NAME = "tranche-claim-form"
DOC_HINT = "Use the documented ResourceClaimTemplate shown on the manifest page of your project."

RESOURCE = "request.resource.resource"
EXACTLY = "variables.exactly"
CLASS = "variables.cls"
SOLD = "variables.sold"
PARAMS = "params.data"
REQUESTS = "variables.requests"
DEVICES = "variables.devices"
MEMORY_KEY = cel.group(cel.concat(CLASS, cel.lit(".memory")))
CORES_KEY = cel.group(cel.concat(CLASS, cel.lit(".cores")))

# "ResourceClaim x" or "ResourceClaimTemplate x", how every message names the object
WHAT = cel.concat(
    cel.group(
        cel.if_(
            cel.eq(RESOURCE, cel.lit("resourceclaims")),
            cel.lit("ResourceClaim "),
            cel.lit("ResourceClaimTemplate "),
        )
    ),
    "object.metadata.name",
)


def _variables() -> list[dict[str, str]]:
    first = f"{REQUESTS}[0]"
    return [
        variable(
            "spec",
            cel.if_(cel.eq(RESOURCE, cel.lit("resourceclaims")), "object.spec", "object.spec.spec"),
        ),
        variable(
            "devices", cel.if_(cel.has("variables.spec.devices"), "variables.spec.devices", "{}")
        ),
        variable("requests", cel.if_(cel.has(f"{DEVICES}.requests"), f"{DEVICES}.requests", "[]")),
        variable(
            "exactly",
            cel.if_(
                cel.all_of(cel.size_is(REQUESTS, 1), cel.has(f"{first}.exactly")),
                f"{first}.exactly",
                "{}",
            ),
        ),
        variable(
            "cls",
            cel.if_(
                cel.has(f"{EXACTLY}.deviceClassName"), f"{EXACTLY}.deviceClassName", cel.lit("")
            ),
        ),
        variable(
            "sold",
            cel.all_of(cel.has(PARAMS), cel.in_(MEMORY_KEY, PARAMS), cel.in_(CORES_KEY, PARAMS)),
        ),
    ]


def _capacity_is_the_products() -> cel.Expr:
    requests = f"{EXACTLY}.capacity.requests"
    return cel.all_of(
        cel.has(f"{EXACTLY}.capacity"),
        cel.has(requests),
        cel.size_is(requests, 2),
        cel.in_(cel.lit("memory"), requests),
        cel.in_(cel.lit("cores"), requests),
        SOLD,
        cel.same_quantity(cel.index(requests, cel.lit("memory")), cel.index(PARAMS, MEMORY_KEY)),
        cel.same_quantity(cel.index(requests, cel.lit("cores")), cel.index(PARAMS, CORES_KEY)),
    )


def _sold_classes() -> cel.Expr:
    """Classes the parameter sells, for the refusal's list of what can be used instead."""
    memory_keys = cel.keys_where(PARAMS, "k", cel.call("k", "endsWith", cel.lit(".memory")))
    return cel.group(
        cel.if_(
            cel.has(PARAMS),
            cel.call(
                memory_keys, "map", "k", cel.call("k", "replace", cel.lit(".memory"), cel.lit(""))
            ),
            "[]",
        )
    )


def _template_form() -> cel.Expr:
    """Templates are named like their class and labelled as the namespace's project."""
    labels = cel.or_default("object.metadata.labels", "{}")
    ns_labels = cel.or_default("namespaceObject.metadata.labels", "{}")

    def same_as_namespace(label: str) -> cel.Expr:
        key = cel.lit(label)
        return cel.all_of(
            cel.in_(key, labels),
            cel.in_(key, ns_labels),
            cel.eq(cel.index(labels, key), cel.index(ns_labels, key)),
        )

    return cel.any_of(
        cel.ne(RESOURCE, cel.lit("resourceclaimtemplates")),
        cel.group(
            cel.all_of(
                cel.eq("object.metadata.name", CLASS),
                cel.in_(cel.lit(LABEL_MANAGED_BY), labels),
                cel.eq(cel.index(labels, cel.lit(LABEL_MANAGED_BY)), cel.lit(MANAGED_BY)),
                same_as_namespace(LABEL_PROJECT),
                same_as_namespace(LABEL_ORGANIZATION),
            )
        ),
    )


def _validations() -> list[dict[str, str]]:
    first = f"{REQUESTS}[0]"
    sold = _sold_classes()

    def absent_or(field: str, expected: str) -> cel.Expr:
        return cel.group(cel.any_of(cel.not_(cel.has(field)), cel.eq(field, expected)))

    def offered_only_if_sold(key: str) -> cel.Expr:
        return cel.group(cel.if_(SOLD, cel.index(PARAMS, key), cel.lit("?")))

    return [
        deny_unless(
            cel.all_of(
                cel.size_is(REQUESTS, 1),
                cel.eq(f"{first}.name", cel.lit(CLAIM_REQUEST_NAME)),
                cel.has(f"{first}.exactly"),
            ),
            message_expression=cel.message(
                WHAT,
                f' must have exactly one device request, named "{CLAIM_REQUEST_NAME}", using '
                f"`exactly` (no firstAvailable). {DOC_HINT}",
            ),
            reason="Invalid",
        ),
        deny_unless(
            SOLD,
            message_expression=cel.message(
                WHAT,
                ' asks for DeviceClass "',
                cel.Expr(CLASS),
                '", which is not sold to this project. Classes you can use here: ',
                cel.group(
                    cel.if_(cel.gt(cel.call(sold, "size"), "0"), cel.joined(sold), cel.lit("none"))
                ),
                ". Buy the product in the portal first, then use its documented template.",
            ),
            reason="Forbidden",
        ),
        deny_unless(
            cel.all_of(
                absent_or(f"{EXACTLY}.allocationMode", cel.lit("ExactCount")),
                absent_or(f"{EXACTLY}.count", "1"),
            ),
            message_expression=cel.message(
                WHAT,
                " must ask for count: 1 (one slice per request). To use more slices, add more "
                f"claims; your quota limits how many you hold. {DOC_HINT}",
            ),
            reason="Invalid",
        ),
        deny_unless(
            cel.any_of(cel.not_(SOLD), cel.group(_capacity_is_the_products())),
            message_expression=cel.message(
                WHAT,
                " must request exactly the capacity of a ",
                cel.Expr(CLASS),
                " slice (memory: ",
                offered_only_if_sold(MEMORY_KEY),
                ", cores: ",
                offered_only_if_sold(CORES_KEY),
                f"): slice sizes are fixed by the product, not chosen per claim. {DOC_HINT}",
            ),
            reason="Invalid",
        ),
        deny_unless(
            cel.all_of(
                cel.absent_or_empty(f"{EXACTLY}.selectors"),
                cel.absent_or_empty(f"{EXACTLY}.tolerations"),
                cel.absent_or_empty(f"{DEVICES}.constraints"),
                cel.absent_or_empty(f"{DEVICES}.config"),
            ),
            message_expression=cel.message(
                WHAT,
                " sets selectors, tolerations, constraints or config: a Tranche slice is chosen "
                "by its DeviceClass alone, so these fields are not allowed. Remove them. "
                + DOC_HINT,
            ),
            reason="Invalid",
        ),
        deny_unless(
            cel.any_of(
                cel.not_(cel.has(f"{EXACTLY}.adminAccess")), cel.not_(f"{EXACTLY}.adminAccess")
            ),
            message_expression=cel.message(
                WHAT,
                " sets adminAccess, which gives access to devices in use by others and is "
                "reserved to the platform. Remove it.",
            ),
            reason="Forbidden",
        ),
        deny_unless(
            _template_form(),
            message_expression=cel.message(
                WHAT,
                " must be named like its DeviceClass (",
                cel.Expr(CLASS),
                f") and carry the labels {LABEL_MANAGED_BY}={MANAGED_BY}, {LABEL_ORGANIZATION} "
                f"and {LABEL_PROJECT} of this namespace. {DOC_HINT}",
            ),
            reason="Invalid",
        ),
    ]


def render_claim_policy() -> dict[str, Any]:
    """Claims and templates must be the documented form of a class sold here."""
    return render_policy(
        NAME,
        {
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["resource.k8s.io"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["resourceclaims", "resourceclaimtemplates"],
                    }
                ]
            },
            # Claims are immutable once created; their later updates (finalizers) are the
            # controller-manager's and must pass even after a cancel removed the class.
            "matchConditions": [
                match_condition(
                    "create-or-template",
                    cel.any_of(
                        cel.eq("request.operation", cel.lit("CREATE")),
                        cel.eq(RESOURCE, cel.lit("resourceclaimtemplates")),
                    ),
                )
            ],
            "variables": _variables(),
            "validations": _validations(),
        },
    )
