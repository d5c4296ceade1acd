"""Claim templates of a project's products, and the entitlements the policies read.

The documented form itself is `tranche.claims.render_claim_template` (the one renderer, which
the portal's manifest page shows too); the claim policy admits exactly that form.
"""

from __future__ import annotations

from typing import Any

from controller.render.spec import ProjectSpec
from tranche.claims import project_labels, render_claim_template
from tranche.names import ENTITLEMENTS_CONFIGMAP
from tranche.products import claim_capacity

__all__ = [
    "claim_capacity",
    "render_claim_template",
    "render_claim_templates",
    "render_entitlements",
]


def render_claim_templates(spec: ProjectSpec) -> list[dict[str, Any]]:
    """Templates of every product the project holds or is still cancelling."""
    products = sorted(
        (e.product for e in spec.entitlements if e.template), key=lambda p: p.device_class
    )
    return [render_claim_template(spec, p) for p in products]


def render_entitlements(spec: ProjectSpec) -> dict[str, Any]:
    """ConfigMap the claim policy takes as its parameter: `<class>.memory` / `<class>.cores`.

    Only classes with a template are listed, so a claim for a class not sold to this project
    finds no key and is denied.
    """
    data: dict[str, str] = {}
    for ent in sorted(spec.entitlements, key=lambda e: e.product.device_class):
        if ent.template:
            capacity = claim_capacity(ent.product)
            data[f"{ent.product.device_class}.memory"] = capacity["memory"]
            data[f"{ent.product.device_class}.cores"] = capacity["cores"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": ENTITLEMENTS_CONFIGMAP,
            "namespace": spec.namespace,
            "labels": project_labels(spec),
        },
        "data": data,
    }
