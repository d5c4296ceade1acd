"""Fleet mode on the real control plane: one `python -m nodeagent fleet` process publishes a
ResourceSlice per kwok node of its fleet (V100 and A100 nodes, 8 simulated GPUs each, the UUIDs
a per-node simulated agent would publish), renews without rewriting unchanged slices, picks up
a node that joins, forgets one that is deleted (the garbage collector deletes its slice through
the owner reference), and the real scheduler allocates claims on its devices.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from controller.render.device_class import render_device_class
from deploy.devcluster.nodes import create_fleet_nodes, delete_fleet_nodes
from deploy.local.agents import fleet_argv
from nodeagent.sim.gpus import sim_uuid
from tests.cluster.nodeagent.conftest import (
    V100,
    agent_slices,
    allocation_of,
    create_pod,
    create_template,
    describe_pod,
)
from tests.helpers.wait import wait_for
from tranche.products import ProductSpec

REPO = Path(__file__).resolve().parents[3]
A100 = "NVIDIA A100-SXM4-40GB"


class Fleet:
    def __init__(self, name: str, process: subprocess.Popen, log: Path) -> None:
        self.name, self.process, self.log = name, process, log

    def log_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "--- fleet publisher log ---\n" + "\n".join(text.splitlines()[-lines:])


@pytest.fixture
def fleet(kube_cluster, tmp_path) -> Iterator[Fleet]:
    """A fleet of 2 V100 and 2 A100 kwok nodes (8 GPUs each) and its publisher, passing every
    second; nodes and publisher are gone afterwards."""
    api = kube_cluster.api_client
    name = f"tr-fleet-{secrets.token_hex(2)}"
    create_fleet_nodes(api, name, 2, V100, 8, prefix=f"{name}-v")
    create_fleet_nodes(api, name, 2, A100, 8, prefix=f"{name}-a")
    log = tmp_path / "fleet.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            fleet_argv(kube_cluster.kubeconfig, name, interval=1.0),
            cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield Fleet(name, proc, log)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        delete_fleet_nodes(api, name)


def _nodes(api, fleet: str) -> dict[str, str]:
    listed = client.CoreV1Api(api).list_node(label_selector=f"tranche.dev/fleet={fleet}")
    return {n.metadata.name: n.metadata.uid for n in listed.items}


def _lease(api, node: str) -> dict | None:
    try:
        resp = client.CoordinationV1Api(api).read_namespaced_lease(
            f"gpu-tranche-dev-{node}", "kube-node-lease", _preload_content=False
        )
    except ApiException as exc:
        if exc.status != 404:
            raise
        return None
    return json.loads(resp.data)


def test_fleet_publishes_each_node_and_follows_joins_and_losses(kube_cluster, fleet):
    api = kube_cluster.api_client
    nodes = _nodes(api, fleet.name)
    assert len(nodes) == 4
    slices = wait_for(
        lambda: len(s := agent_slices(api, list(nodes))) == 4 and s,
        60,
        lambda: "4 fleet slices\n" + fleet.log_tail(),
    )
    for s in slices:
        node = s["spec"]["nodeName"]
        owner = s["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("Node", node, nodes[node])
        devices = s["spec"]["devices"]
        assert [d["attributes"]["uuid"]["string"] for d in devices] == [
            sim_uuid(node, i) for i in range(8)
        ]
        model = A100 if node.startswith(f"{fleet.name}-a") else V100
        assert {d["attributes"]["productName"]["string"] for d in devices} == {model}
        memory = devices[0]["capacity"]["memory"]
        if model == A100:
            assert memory["value"] == "40Gi"
            assert memory["requestPolicy"]["validValues"] == ["10Gi", "20Gi", "40Gi"]
            assert devices[0]["attributes"]["cudaComputeCapability"] == {"version": "8.0.0"}
        else:
            assert memory["value"] == "32Gi"
            assert memory["requestPolicy"]["validValues"] == ["8Gi", "16Gi", "32Gi"]
        holder = (_lease(api, node) or {}).get("spec", {}).get("holderIdentity", "")
        assert holder.endswith(f"-{fleet.process.pid}"), holder

    # Renewals write leases only: after a few passes no slice has been rewritten.
    first = sorted(nodes)[0]
    renewed = _lease(api, first)["spec"]["renewTime"]
    wait_for(
        lambda: _lease(api, first)["spec"]["renewTime"] != renewed,
        30,
        lambda: "a lease renewal\n" + fleet.log_tail(),
    )
    versions = {s["metadata"]["name"]: s["metadata"]["resourceVersion"] for s in slices}
    now = {
        s["metadata"]["name"]: s["metadata"]["resourceVersion"]
        for s in agent_slices(api, list(nodes))
    }
    assert now == versions

    (joined,) = create_fleet_nodes(api, fleet.name, 1, V100, 8, prefix=f"{fleet.name}-v", start=2)
    wait_for(
        lambda: agent_slices(api, [joined]), 30, lambda: "the new node's slice\n" + fleet.log_tail()
    )

    lost = f"{fleet.name}-v-0"
    client.CoreV1Api(api).delete_node(lost)
    wait_for(
        lambda: not agent_slices(api, [lost]) and _lease(api, lost) is None,
        60,
        lambda: (
            "the lost node's slice (garbage collected) and lease to be gone\n" + fleet.log_tail()
        ),
    )
    assert f"node {lost} left" in fleet.log.read_text(), fleet.log_tail()
    assert len(agent_slices(api, list(_nodes(api, fleet.name)))) == 4
    assert fleet.process.poll() is None, fleet.log_tail()


def test_scheduler_allocates_claims_on_fleet_nodes(kube_cluster, fleet, namespace):
    api = kube_cluster.api_client
    nodes = sorted(_nodes(api, fleet.name))
    wait_for(
        lambda: len(agent_slices(api, nodes)) == 4, 60, lambda: "4 slices\n" + fleet.log_tail()
    )
    resource = client.ResourceV1Api(api)
    tag = secrets.token_hex(2)
    products = [
        ProductSpec(
            device_class=f"tranche-v100-8g-f{tag}",
            gpu_name=V100,
            memory_mib=8192,
            compute_percent=25,
        ),
        ProductSpec(
            device_class=f"tranche-a100-10g-f{tag}",
            gpu_name=A100,
            memory_mib=10240,
            compute_percent=25,
        ),
    ]
    try:
        for product, prefix in zip(products, ("-v", "-a"), strict=True):
            resource.create_device_class(render_device_class(product))
            create_template(api, namespace, product)
            pod = f"p{prefix}"
            on = [n for n in nodes if n.startswith(f"{fleet.name}{prefix}-")]
            create_pod(api, namespace, pod, product, nodes=on)
            result = wait_for(
                lambda pod=pod: allocation_of(api, namespace, pod),
                60,
                lambda pod=pod: f"allocation of {pod}\n{describe_pod(api, namespace, pod)}",
            )
            assert result["pool"] in on, result
            size = f"{product.memory_mib // 1024}Gi"
            assert result["consumedCapacity"] == {"memory": size, "cores": "25"}, result
    finally:
        for product in products:
            try:
                resource.delete_device_class(product.device_class)
            except ApiException as exc:
                if exc.status != 404:
                    raise
