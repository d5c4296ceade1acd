"""Pure renderers of the documented ResourceClaimTemplate and a sample workload using it.

No Django and no Kubernetes client here: plain dataclasses in, plain dicts (and YAML text) out.
The claim template itself is `tranche.claims.render_claim_template` (the one renderer the
controller applies too), re-exported here with the one `ProductSpec`.

Shape shared with the controller and the admission policies (keep exactly):
- the template is named like the DeviceClass (`tranche-v100-8g`), labelled with
  `tranche.dev/organization`, `tranche.dev/project` and `app.kubernetes.io/managed-by: tranche`;
- one request named `gpu`: `exactly: {deviceClassName, count: 1,
  capacity: {requests: {memory: "8Gi", cores: "25"}}}` (apiVersion resource.k8s.io/v1).
The sample Deployment is the tenant's own object: it carries no `managed-by: tranche` label, so
the controller's prune-by-label never touches it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

# The claim template, its names and the product spec are the shared ones of `tranche`, so the
# page shows exactly what the controller applies and the admission policy admits.
from tranche.claims import render_claim_template
from tranche.names import CLAIM_REQUEST_NAME, LABEL_PROJECT
from tranche.products import ProductSpec, memory_quantity

__all__ = [
    "ProductSpec",
    "ProjectRef",
    "WorkloadSpec",
    "memory_quantity",
    "render_claim_template",
    "render_models_volume",
    "render_sample_deployment",
    "to_yaml",
]


@dataclass(frozen=True)
class ProjectRef:
    """Where the objects go and whom they belong to."""

    namespace: str
    organization: str
    project: str


@dataclass(frozen=True)
class WorkloadSpec:
    """The sample workload; defaults follow the lessons of running Ollama on an 8 GiB V100 slice."""

    name: str = "llm"
    image: str = "ollama/ollama:0.24.0"
    ram_request: str = "2Gi"
    ram_limit: str = "4Gi"
    cpu_request: str = "1"
    models_volume_size: str = "20Gi"
    models_path: str = "/models"
    context_length: int = 16384
    # Tenant namespaces warn on anything below Pod Security "restricted"; the sample we hand
    # out must not, so it runs as an unprivileged user that owns the model volume.
    run_as_user: int = 1000


def render_models_volume(ref: ProjectRef, workload: WorkloadSpec) -> dict[str, Any]:
    """A PersistentVolumeClaim for model files, so a pod restart does not lose them."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": f"{workload.name}-models", "namespace": ref.namespace},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": workload.models_volume_size}},
        },
    }


def render_sample_deployment(
    ref: ProjectRef, product: ProductSpec, workload: WorkloadSpec | None = None
) -> dict[str, Any]:
    """A Deployment whose pod claims one slice through the product's ResourceClaimTemplate.

    The container's RAM request/limit is the host memory of the process, not the GPU slice.
    """
    w = workload or WorkloadSpec()
    app_labels = {"app.kubernetes.io/name": w.name, LABEL_PROJECT: ref.project}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": w.name, "namespace": ref.namespace, "labels": app_labels},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app.kubernetes.io/name": w.name}},
            "template": {
                "metadata": {"labels": app_labels},
                "spec": {
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": w.run_as_user,
                        "runAsGroup": w.run_as_user,
                        "fsGroup": w.run_as_user,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "resourceClaims": [
                        {
                            "name": CLAIM_REQUEST_NAME,
                            "resourceClaimTemplateName": product.device_class,
                        }
                    ],
                    "containers": [
                        {
                            "name": w.name,
                            "image": w.image,
                            "env": [
                                {"name": "OLLAMA_CONTEXT_LENGTH", "value": str(w.context_length)},
                                {"name": "OLLAMA_MODELS", "value": w.models_path},
                                # Ollama keeps its key under $HOME; an unprivileged user has
                                # no writable home in the image, the model volume is one.
                                {"name": "HOME", "value": w.models_path},
                            ],
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "ports": [{"containerPort": 11434, "name": "http"}],
                            "resources": {
                                "requests": {"cpu": w.cpu_request, "memory": w.ram_request},
                                "limits": {"memory": w.ram_limit},
                                "claims": [{"name": CLAIM_REQUEST_NAME}],
                            },
                            "volumeMounts": [{"name": "models", "mountPath": w.models_path}],
                        }
                    ],
                    "volumes": [
                        {
                            "name": "models",
                            "persistentVolumeClaim": {"claimName": f"{w.name}-models"},
                        }
                    ],
                },
            },
        },
    }


class _PlainDumper(yaml.SafeDumper):
    """Writes shared sub-objects out in full: `&id001`/`*id001` aliases confuse tenants and
    some tools that read manifests."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def to_yaml(docs: list[dict[str, Any]]) -> str:
    """Multi-document YAML, keys in the order rendered, no anchors or aliases."""
    return yaml.dump_all(docs, Dumper=_PlainDumper, sort_keys=False, default_flow_style=False)
