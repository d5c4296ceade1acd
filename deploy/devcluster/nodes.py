"""Fake GPU nodes played by kwok: create N labelled nodes and wait until Ready.

kwok manages only nodes carrying `kwok.x-k8s.io/node: fake`; it marks them
Ready and plays the kubelet for their pods. GPUs themselves are published by
the node agent as ResourceSlices (DRA), so these nodes advertise no extended
resources: only labels naming the GPU model. Idempotent: an existing node with
the same name is kept as is.
"""

from __future__ import annotations

import re
import time

from kubernetes import client
from kubernetes.client.rest import ApiException

from deploy.devcluster.config import FAKE_NODE_LABEL
from tranche.names import DOMAIN

GPU_MODEL_LABEL = f"{DOMAIN}/gpu-model"
GPU_COUNT_LABEL = f"{DOMAIN}/gpu-count"
# Labels NVIDIA's GPU feature discovery sets; kept so selectors written for
# real clusters (the chart's node-agent DaemonSet) also match the fake nodes.
NVIDIA_PRODUCT_LABEL = "nvidia.com/gpu.product"
NVIDIA_PRESENT_LABEL = "nvidia.com/gpu.present"


def label_value(text: str) -> str:
    """Turn free text ("Tesla V100-PCIE-32GB") into a valid label value."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")
    return value[:63].rstrip("-_.")


def fake_node_manifest(name: str, gpu_model: str, gpus_per_node: int = 1) -> dict:
    """The Node object kwok will adopt: labels for kwok and the GPU model."""
    key, value = FAKE_NODE_LABEL
    model = label_value(gpu_model)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                key: value,
                "type": "kwok",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                GPU_MODEL_LABEL: model,
                GPU_COUNT_LABEL: str(gpus_per_node),
                NVIDIA_PRODUCT_LABEL: model,
                NVIDIA_PRESENT_LABEL: "true",
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", key: value},
        },
        "spec": {},
        "status": {
            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
        },
    }


def _is_ready(node: client.V1Node) -> bool:
    conditions = (node.status and node.status.conditions) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def wait_nodes_ready(api_client: client.ApiClient, names: list[str], timeout: float = 60) -> None:
    """Poll until every named node reports Ready; fail naming the laggards."""
    core = client.CoreV1Api(api_client)
    deadline = time.monotonic() + timeout
    pending = list(names)
    while pending:
        pending = [n for n in pending if not _is_ready(core.read_node(n))]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"nodes not Ready after {timeout:.0f}s: {', '.join(pending)}; "
                "is kwok running? see .state/cluster/logs/kwok.log"
            )
        time.sleep(0.3)


def create_fake_gpu_nodes(
    api_client: client.ApiClient,
    count: int,
    gpu_model: str = "Tesla V100-PCIE-32GB",
    prefix: str = "kwok-gpu",
    wait_ready: bool = True,
) -> list[str]:
    """Create `count` fake GPU nodes named `<prefix>-<i>` and return their names."""
    core = client.CoreV1Api(api_client)
    names = [f"{prefix}-{i}" for i in range(count)]
    for name in names:
        try:
            core.create_node(fake_node_manifest(name, gpu_model))
        except ApiException as exc:
            if exc.status != 409:  # 409: already exists, keep it (idempotent)
                raise
    if wait_ready:
        wait_nodes_ready(api_client, names)
    return names


def delete_fake_nodes(api_client: client.ApiClient, names: list[str]) -> None:
    """Delete the named nodes without waiting; missing ones are ignored."""
    core = client.CoreV1Api(api_client)
    for name in names:
        try:
            core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
