"""Pure renderer of the slice check: a Pod of the sample tenant image (`tranche.names.
SAMPLE_IMAGE`) a tenant applies first to see the slice they bought, before their own workload.

The image's entrypoint prints what `nvidia-smi --query-gpu=name,memory.total` says inside the
container (the slice, not the card), allocates GPU memory in 1 GiB steps up to
`SAMPLE_ALLOC_MIB` (2 GiB past the slice here, so the last step shows the cap refusing it with
CUDA_ERROR_OUT_OF_MEMORY), then computes with what it holds. It claims one slice through the
product's ResourceClaimTemplate and is hardened as the policies and Pod Security "restricted"
want, so it is admitted without a warning. No Django and no Kubernetes client here.
"""

from __future__ import annotations

from typing import Any

from portal.catalog.manifests import ProjectRef
from tranche.names import CLAIM_REQUEST_NAME, LABEL_PROJECT, SAMPLE_IMAGE
from tranche.products import ProductSpec

CHECK_NAME = "slice-check"
PAST_THE_SLICE_MIB = 2048
RUN_AS_USER = 1000


def check_alloc_mib(product: ProductSpec) -> int:
    """How much GPU memory the check asks for: the slice and 2 GiB more."""
    return product.memory_mib + PAST_THE_SLICE_MIB


def render_slice_check(ref: ProjectRef, product: ProductSpec) -> dict[str, Any]:
    """The check Pod for `product` in the project's namespace (restartPolicy Never)."""
    labels = {"app.kubernetes.io/name": CHECK_NAME, LABEL_PROJECT: ref.project}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": CHECK_NAME, "namespace": ref.namespace, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": RUN_AS_USER,
                "runAsGroup": RUN_AS_USER,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "resourceClaims": [
                {"name": CLAIM_REQUEST_NAME, "resourceClaimTemplateName": product.device_class}
            ],
            "containers": [
                {
                    "name": "check",
                    "image": SAMPLE_IMAGE,
                    "env": [{"name": "SAMPLE_ALLOC_MIB", "value": str(check_alloc_mib(product))}],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "256Mi"},
                        "limits": {"memory": "256Mi"},
                        "claims": [{"name": CLAIM_REQUEST_NAME}],
                    },
                }
            ],
        },
    }
