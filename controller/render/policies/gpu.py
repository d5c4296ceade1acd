"""Policy `tranche-no-device-plugin-gpus`: no whole GPUs through device-plugin resources.

A container asking for `nvidia.com/gpu` (or another vendor's extended GPU resource) in its limits
or requests would get whole cards outside any slice; Tranche sells slices through resource claims
only, so such pods, and workloads whose pod template asks for one, are refused with the form to
use instead.
"""

from __future__ import annotations

from typing import Any

from controller.render.policies import cel
from controller.render.policies.objects import deny_unless, render_policy, variable
from controller.render.policies.pods import (
    container_names_where,
    containers_message,
    pod_or_template_changed,
    pod_rules,
    pod_variables,
)
from tranche.names import CLAIM_REQUEST_NAME

NAME = "tranche-no-device-plugin-gpus"
GPU_RESOURCE_PREFIXES = ("nvidia.com/", "amd.com/", "gpu.intel.com/", "habana.ai/")

REFUSAL = (
    " request a whole GPU through a device-plugin resource such as nvidia.com/gpu, which Tranche "
    "does not offer: shared GPU slices are only available through resource claims. Remove the "
    f"nvidia.com/gpu request and add resourceClaims: [{{name: {CLAIM_REQUEST_NAME}, "
    "resourceClaimTemplateName: <your product class, e.g. tranche-v100-8g>}] as shown on the "
    "manifest page of your project."
)


def _asks_for_gpu(resources: str) -> cel.Expr:
    """The resource list (`limits` or `requests`) names a GPU resource."""
    return cel.group(
        cel.all_of(
            cel.has(resources),
            cel.exists(resources, "k", cel.starts_with_any("k", GPU_RESOURCE_PREFIXES)),
        )
    )


def render_gpu_policy() -> dict[str, Any]:
    """Device-plugin GPU resources are refused in every kind of container, in pods and in the
    pod templates of workloads (same message)."""
    asks_gpu = cel.all_of(
        cel.has("c.resources"),
        cel.group(
            cel.any_of(_asks_for_gpu("c.resources.limits"), _asks_for_gpu("c.resources.requests"))
        ),
    )
    return render_policy(
        NAME,
        {
            "matchConstraints": pod_rules(),
            "matchConditions": [pod_or_template_changed()],
            "variables": [
                *pod_variables(),
                variable("gpuContainers", container_names_where(asks_gpu)),
            ],
            "validations": [
                deny_unless(
                    cel.is_empty("variables.gpuContainers"),
                    message_expression=containers_message("gpuContainers", REFUSAL),
                    reason="Forbidden",
                )
            ],
        },
    )
