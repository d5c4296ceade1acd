"""Node agents on the real control plane: 2 kwok nodes x 4 simulated V100.

Slices the API server accepts; pods using the documented claim template allocated by the real
scheduler (4 x 8 GiB share one GPU, a fifth goes elsewhere, the pod after all are full stays
Pending); and the full simulation path (kubelet-lite -> gRPC prepare -> workload under the
core -> portal) for one pod whose workload overruns its 8 GiB.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from kubernetes import client

from deploy.devcluster.nodes import create_fake_gpu_nodes, delete_fake_nodes

REPO = Path(__file__).resolve().parents[3]
DRIVER = "gpu.tranche.dev"


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.25)


@pytest.fixture(scope="module")
def agents(kube_cluster):
    """Two kwok nodes, each with a publish-only agent (no workloads: keeps 2 cores free)."""
    prefix = f"tr-agent-{secrets.token_hex(2)}"
    nodes = create_fake_gpu_nodes(kube_cluster.api_client, 2, prefix=prefix)
    root = Path(tempfile.mkdtemp(prefix="tr-ag-"))
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "nodeagent", "run", "--node", n, "--simulate",
             "--no-kubelet-lite", "--kubeconfig", str(kube_cluster.kubeconfig),
             "--state-dir", str(root / n), "--kubelet-dir", str(root / n / "k"),
             "--cdi-dir", str(root / n / "cdi"), "--interval", "0.5"],
            cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
            stdout=open(root / f"{n}.log", "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
        )
        for n in nodes
    ]  # fmt: skip
    yield nodes, root
    for p in procs:
        p.terminate()
        p.wait(timeout=20)
    delete_fake_nodes(kube_cluster.api_client, nodes)


def _slices(api, nodes) -> list[dict]:
    resp = client.ResourceV1Api(api).list_resource_slice(
        field_selector=f"spec.driver={DRIVER}", _preload_content=False
    )
    return [s for s in json.loads(resp.data)["items"] if s["spec"]["nodeName"] in nodes]


def _device_class(api, name: str) -> None:
    client.ResourceV1Api(api).create_device_class(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f'device.driver == "{DRIVER}" && device.attributes'
                            f'["{DRIVER}"].productName == "Tesla V100-PCIE-32GB"'
                        }
                    }
                ]
            },
        }
    )


def _template(api, ns: str, cls: str) -> None:
    """The documented form (issue 6): named like the class, one request `gpu`."""
    client.ResourceV1Api(api).create_namespaced_resource_claim_template(
        ns,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": cls},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {
                                    "deviceClassName": cls,
                                    "count": 1,
                                    "capacity": {"requests": {"memory": "8Gi", "cores": "25"}},
                                },
                            }
                        ]
                    }
                }
            },
        },
    )


def _pod(api, ns: str, name: str, cls: str, nodes: list[str], *, annotations=None) -> None:
    client.CoreV1Api(api).create_namespaced_pod(
        ns,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "kubernetes.io/hostname",
                                            "operator": "In",
                                            "values": nodes,
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                },
                "containers": [
                    {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
                ],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": cls}],
            },
        },
    )


def _allocations(api, ns: str) -> list[tuple[str, str]]:
    resp = client.ResourceV1Api(api).list_namespaced_resource_claim(ns, _preload_content=False)
    out = []
    for c in json.loads(resp.data)["items"]:
        for r in (
            (c.get("status", {}).get("allocation") or {}).get("devices", {}).get("results", [])
        ):
            out.append((r["pool"], r["device"]))
    return out


def test_slices_accepted_and_scheduler_packs_8gib_shares(kube_cluster, agents, namespace):
    api = kube_cluster.api_client
    nodes, _ = agents
    slices = _wait(lambda: len(s := _slices(api, nodes)) == 2 and s, 60, "2 ResourceSlices")
    for s in slices:
        assert len(s["spec"]["devices"]) == 4
        assert s["spec"]["devices"][0]["allowMultipleAllocations"] is True
    cls = f"tranche-v100-8g-{secrets.token_hex(2)}"
    _device_class(api, cls)
    try:
        _template(api, namespace, cls)
        for i in range(5):  # all on the first node: 4 share a GPU, the fifth needs another
            _pod(api, namespace, f"p{i}", cls, nodes[:1])
        allocs = _wait(lambda: len(a := _allocations(api, namespace)) == 5 and a, 60, "5 allocs")
        per_device = Counter(allocs)
        assert max(per_device.values()) == 4, per_device
        assert len(per_device) == 2, per_device
        for i in range(5, 32):  # fill all 8 GPUs of both nodes
            _pod(api, namespace, f"p{i}", cls, nodes)
        allocs = _wait(lambda: len(a := _allocations(api, namespace)) == 32 and a, 120, "32")
        assert set(Counter(allocs).values()) == {4}
        _pod(api, namespace, "one-too-many", cls, nodes)
        core = client.CoreV1Api(api)

        def unschedulable() -> bool:
            pod = core.read_namespaced_pod("one-too-many", namespace)
            return any(
                c.type == "PodScheduled" and c.status == "False"
                for c in (pod.status.conditions or [])
            )

        _wait(unschedulable, 30, "the 33rd pod to be reported unschedulable")
        assert core.read_namespaced_pod("one-too-many", namespace).status.phase == "Pending"
    finally:
        client.ResourceV1Api(api).delete_device_class(cls)
