"""The documented ResourceClaimTemplate of a product: the one renderer of that form.

The controller applies exactly this, the portal's manifest page shows exactly this and the claim
policy admits exactly this. Pure: plain data in, a plain dict out.
"""

from __future__ import annotations

from typing import Any, Protocol

from tranche.names import (
    CLAIM_REQUEST_NAME,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    LABEL_ORGANIZATION,
    LABEL_PROJECT,
    MANAGED_BY,
)
from tranche.products import ProductSpec, claim_capacity


class ProjectIdentity(Protocol):
    """What labels and namespaced objects need of a project (the controller's ProjectSpec, or
    the portal's ProjectRef)."""

    @property
    def namespace(self) -> str: ...
    @property
    def organization(self) -> str: ...
    @property
    def project(self) -> str: ...


def project_labels(spec: ProjectIdentity) -> dict[str, str]:
    """Labels on every object Tranche manages in a project namespace (prune selects on them)."""
    return {
        LABEL_ORGANIZATION: spec.organization,
        LABEL_PROJECT: spec.project,
        LABEL_MANAGED_BY: MANAGED_BY,
    }


def platform_labels() -> dict[str, str]:
    """Labels on cluster-scoped objects shared by all projects (classes, policies)."""
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: "platform"}


def render_claim_template(spec: ProjectIdentity, product: ProductSpec) -> dict[str, Any]:
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
