"""The project's LimitRange: container defaults so no workload starts with a tiny RAM limit."""

from __future__ import annotations

from typing import Any

from controller.render.spec import ProjectSpec
from tranche.claims import project_labels
from tranche.names import LIMIT_RANGE_NAME
from tranche.products import cpu_quantity, memory_quantity


def render_limit_range(spec: ProjectSpec) -> dict[str, Any]:
    """Default container memory request/limit (and a CPU request, which the quota requires)."""
    limits = spec.limits
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {
            "name": LIMIT_RANGE_NAME,
            "namespace": spec.namespace,
            "labels": project_labels(spec),
        },
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "defaultRequest": {
                        "cpu": cpu_quantity(limits.default_cpu_request_millicores),
                        "memory": memory_quantity(limits.default_memory_request_mib),
                    },
                    "default": {"memory": memory_quantity(limits.default_memory_limit_mib)},
                }
            ]
        },
    }
