"""A GPU out for maintenance: one cluster-scoped DeviceTaintRule (resource.k8s.io/v1, GA in
Kubernetes 1.37) tainting that one device `tranche.dev/gpu-maintenance:NoSchedule`. The
scheduler places no new claim on it; claims already allocated there keep running (NoSchedule
evicts nothing), so the GPU drains as its pods end."""

from __future__ import annotations

import hashlib
from typing import Any

from tranche.names import (
    DOMAIN,
    DRIVER,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    TAINT_GPU_MAINTENANCE,
)

COMPONENT = "gpu-maintenance"


def maintenance_rule_name(node: str, device: str) -> str:
    """`tranche-maintenance-<device>-<hash of node/device>`: a valid name for any node name."""
    digest = hashlib.sha256(f"{node}/{device}".encode()).hexdigest()[:12]
    return f"tranche-maintenance-{device}-{digest}"


def render_maintenance_rule(node: str, device: str, gpu_uuid: str) -> dict[str, Any]:
    """The rule for `device` (e.g. "gpu-2") of `node`'s pool (the agent names its pool after
    the node); the GPU's UUID is kept as an annotation for whoever reads the rule."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": maintenance_rule_name(node, device),
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: COMPONENT},
            "annotations": {f"{DOMAIN}/gpu-uuid": gpu_uuid},
        },
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": node, "device": device},
            "taint": {"key": TAINT_GPU_MAINTENANCE, "value": "maintenance", "effect": "NoSchedule"},
        },
    }
