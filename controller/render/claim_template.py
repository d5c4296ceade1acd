"""The documented ResourceClaimTemplate per product, and the entitlements the policies read.

The one renderer of the documented form: the portal's manifest page shows exactly this (it
imports it), the claim policy admits exactly this, and a unit test pins both for every product.
"""

from __future__ import annotations

from typing import Any

from controller.render.spec import (
    CLAIM_REQUEST_NAME,
    ENTITLEMENTS_CONFIGMAP,
    ProjectIdentity,
    ProjectSpec,
    SliceSize,
    memory_quantity,
    project_labels,
)


def claim_capacity(product: SliceSize) -> dict[str, str]:
    """The exact capacity requests of one slice of `product`."""
    return {"memory": memory_quantity(product.memory_mib), "cores": str(product.compute_percent)}


def render_claim_template(spec: ProjectIdentity, product: SliceSize) -> dict[str, Any]:
    """Template named like the class; one request `gpu`, count 1, the product's capacity."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": product.device_class,
            "namespace": spec.namespace,
            "labels": project_labels(spec),
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": CLAIM_REQUEST_NAME,
                            "exactly": {
                                "deviceClassName": product.device_class,
                                "count": 1,
                                "capacity": {"requests": claim_capacity(product)},
                            },
                        }
                    ]
                }
            }
        },
    }


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
