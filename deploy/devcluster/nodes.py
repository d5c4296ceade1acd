"""Fake GPU nodes played by kwok: create N labelled nodes and wait until Ready.

kwok manages only nodes carrying `kwok.x-k8s.io/node: fake`; it marks them
Ready and plays the kubelet for their pods. GPUs themselves are published by
the node agent as ResourceSlices (DRA), so these nodes advertise no extended
resources: only labels naming the GPU model and count, and the exact model in the
`tranche.dev/sim-gpu-model` annotation (what a simulated node's GPUs are). Idempotent:
an existing node with the same name is kept as is.

`create_fleet_nodes` makes a whole fleet at once (labelled `tranche.dev/fleet=<name>`, the
selector `python -m nodeagent fleet` publishes for): creations run a few at a time and
readiness is one LIST per poll, not one GET per node.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client
from kubernetes.client.rest import ApiException

from deploy.devcluster.config import FAKE_NODE_LABEL
from tranche.names import ANNOTATION_SIM_GPU_MODEL, DOMAIN, LABEL_FLEET, LABEL_GPU_COUNT

GPU_MODEL_LABEL = f"{DOMAIN}/gpu-model"
GPU_COUNT_LABEL = LABEL_GPU_COUNT
FLEET_LABEL = LABEL_FLEET
CREATE_CONCURRENCY = 8  # node creations in flight: enough to hide latency, gentle on 2 cores
# Labels NVIDIA's GPU feature discovery sets; kept so selectors written for
# real clusters (the chart's node-agent DaemonSet) also match the fake nodes.
NVIDIA_PRODUCT_LABEL = "nvidia.com/gpu.product"
NVIDIA_PRESENT_LABEL = "nvidia.com/gpu.present"


def label_value(text: str) -> str:
    """Turn free text ("Tesla V100-PCIE-32GB") into a valid label value."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")
    return value[:63].rstrip("-_.")


def fake_node_manifest(
    name: str, gpu_model: str, gpus_per_node: int = 1, fleet: str | None = None
) -> dict:
    """The Node object kwok will adopt: labels for kwok, the GPU model and count (and the
    fleet it belongs to, if any)."""
    key, value = FAKE_NODE_LABEL
    model = label_value(gpu_model)
    manifest = {
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
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                key: value,
                ANNOTATION_SIM_GPU_MODEL: gpu_model,
            },
        },
        "spec": {},
        "status": {
            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
        },
    }
    if fleet is not None:
        manifest["metadata"]["labels"][FLEET_LABEL] = label_value(fleet)
    return manifest


def _is_ready(node: client.V1Node) -> bool:
    conditions = (node.status and node.status.conditions) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def wait_nodes_ready(
    api_client: client.ApiClient,
    names: list[str],
    timeout: float = 60,
    label_selector: str = "",
) -> None:
    """Poll (one LIST of nodes per poll, narrowed by `label_selector`) until every named node
    reports Ready; fail naming the laggards."""
    core = client.CoreV1Api(api_client)
    deadline = time.monotonic() + timeout
    pending = set(names)
    selector = label_selector or f"{FAKE_NODE_LABEL[0]}={FAKE_NODE_LABEL[1]}"
    while pending:
        listed = core.list_node(label_selector=selector).items
        pending -= {n.metadata.name for n in listed if _is_ready(n)}
        if not pending:
            return
        if time.monotonic() > deadline:
            shown = ", ".join(sorted(pending)[:10]) + (" ..." if len(pending) > 10 else "")
            raise TimeoutError(
                f"{len(pending)} node(s) not Ready after {timeout:.0f}s: {shown}; "
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


def _create_node(core: client.CoreV1Api, manifest: dict) -> None:
    try:
        core.create_node(manifest, _preload_content=False)
    except ApiException as exc:
        if exc.status != 409:  # 409: already exists, keep it (idempotent)
            raise


def create_fleet_nodes(
    api_client: client.ApiClient,
    fleet: str,
    count: int,
    gpu_model: str = "Tesla V100-PCIE-32GB",
    gpus_per_node: int = 8,
    *,
    prefix: str | None = None,
    start: int = 0,
    wait_ready: bool = True,
    timeout: float = 120,
) -> list[str]:
    """Create nodes `<prefix>-<start>` .. `<prefix>-<start+count-1>` (prefix: `fleet`) in
    fleet `fleet`, each simulated with `gpus_per_node` GPUs of `gpu_model`; returns their names.

    Idempotent (existing nodes are kept). Call it once per model to mix models in one fleet
    (a distinct `prefix` or `start` each). Readiness: one LIST of the fleet per poll.
    """
    core = client.CoreV1Api(api_client)
    names = [f"{prefix or fleet}-{i}" for i in range(start, start + count)]
    manifests = [fake_node_manifest(n, gpu_model, gpus_per_node, fleet) for n in names]
    with ThreadPoolExecutor(CREATE_CONCURRENCY) as pool:
        list(pool.map(lambda m: _create_node(core, m), manifests))  # list(): raise any error
    if wait_ready:
        wait_nodes_ready(api_client, names, timeout, f"{FLEET_LABEL}={label_value(fleet)}")
    return names


def delete_fleet_nodes(api_client: client.ApiClient, fleet: str) -> None:
    """Delete every node of `fleet` in one call, without waiting (their slices follow through
    the garbage collector)."""
    client.CoreV1Api(api_client).delete_collection_node(
        label_selector=f"{FLEET_LABEL}={label_value(fleet)}"
    )


def delete_fake_nodes(api_client: client.ApiClient, names: list[str]) -> None:
    """Delete the named nodes without waiting; missing ones are ignored."""
    core = client.CoreV1Api(api_client)
    for name in names:
        try:
            core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
