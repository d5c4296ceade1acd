"""The project's ResourceQuota: slices per DeviceClass plus CPU, memory and pods of the plan."""

from __future__ import annotations

from typing import Any

from controller.render.spec import ProjectSpec
from tranche.claims import project_labels
from tranche.names import QUOTA_NAME
from tranche.products import cpu_quantity, memory_quantity


def device_quota_key(device_class: str) -> str:
    """The quota resource name Kubernetes counts claimed devices of a class under."""
    return f"{device_class}.deviceclass.resource.k8s.io/devices"


def render_resource_quota(spec: ProjectSpec) -> dict[str, Any]:
    """Quota with every known class listed: unbought classes get "0" so none is unlimited."""
    hard: dict[str, str] = {
        "requests.cpu": cpu_quantity(spec.limits.cpu_millicores),
        "requests.memory": memory_quantity(spec.limits.memory_mib),
        "pods": str(spec.limits.pods),
    }
    devices = {p.device_class: 0 for p in spec.all_products}
    for ent in spec.entitlements:
        devices[ent.product.device_class] = ent.quantity
    for device_class in sorted(devices):
        hard[device_quota_key(device_class)] = str(devices[device_class])
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": QUOTA_NAME,
            "namespace": spec.namespace,
            "labels": project_labels(spec),
        },
        "spec": {"hard": hard},
    }
