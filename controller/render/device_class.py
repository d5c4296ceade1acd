"""One cluster-scoped DeviceClass per product: the Tranche driver, the GPU model, shareable."""

from __future__ import annotations

import json
from typing import Any

from tranche.claims import platform_labels
from tranche.names import DRIVER
from tranche.products import ProductSpec


def device_class_selector(product: ProductSpec) -> str:
    """CEL over a ResourceSlice device: our driver, this GPU model, and sharing allowed.

    `allowMultipleAllocations` is required so a slice never lands on an exclusive device: a
    capacity request on an exclusive device would hand the tenant the whole card.
    """
    return (
        f"device.driver == {json.dumps(DRIVER)} && "
        f"device.attributes[{json.dumps(DRIVER)}].productName == {json.dumps(product.gpu_name)} && "
        "device.allowMultipleAllocations == true"
    )


def render_device_class(product: ProductSpec) -> dict[str, Any]:
    """DeviceClass named like the product (`tranche-v100-8g`)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": product.device_class, "labels": platform_labels()},
        "spec": {"selectors": [{"cel": {"expression": device_class_selector(product)}}]},
    }
