"""Pure renderers of the documented ResourceClaimTemplate and a sample workload using it.

No Django and no Kubernetes client here: plain dataclasses in, plain dicts (and YAML text) out, so
the controller can import this module and apply exactly what the portal shows tenants.

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

DRA_DRIVER = "gpu.tranche.dev"
LABEL_ORGANIZATION = "tranche.dev/organization"
LABEL_PROJECT = "tranche.dev/project"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "tranche"
CLAIM_REQUEST_NAME = "gpu"


@dataclass(frozen=True)
class ProductSpec:
    """What a slice product means to Kubernetes."""

    device_class: str
    memory_mib: int
    compute_percent: int
    gpu_name: str = ""
    compute_capability: str = ""


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


def memory_quantity(memory_mib: int) -> str:
    """Kubernetes quantity for a slice's memory: whole GiB as `8Gi`, else `<n>Mi`."""
    if memory_mib % 1024 == 0:
        return f"{memory_mib // 1024}Gi"
    return f"{memory_mib}Mi"


def tranche_labels(ref: ProjectRef) -> dict[str, str]:
    """Labels on every object Tranche manages in a project namespace."""
    return {
        LABEL_ORGANIZATION: ref.organization,
        LABEL_PROJECT: ref.project,
        LABEL_MANAGED_BY: MANAGED_BY,
    }


def render_claim_template(ref: ProjectRef, product: ProductSpec) -> dict[str, Any]:
    """The documented ResourceClaimTemplate for `product` in the project's namespace."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": product.device_class,
            "namespace": ref.namespace,
            "labels": tranche_labels(ref),
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
                                "capacity": {
                                    "requests": {
                                        "memory": memory_quantity(product.memory_mib),
                                        "cores": str(product.compute_percent),
                                    }
                                },
                            },
                        }
                    ]
                }
            }
        },
    }


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
