"""Fixtures for node agents on the real control plane.

`start_agent(node, ...)` runs `python -m nodeagent run --simulate` for a kwok node as a real
process (log kept for failure messages) and stops it at teardown, even when the test failed.
`products(...)` creates DeviceClasses rendered by the controller (unique names, so tests running
beside the controller's never share one) and deletes them afterwards. Objects a tenant sees
(ResourceClaimTemplate) come from the same renderers as the portal's manifest page.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from controller.render.claim_template import render_claim_template
from controller.render.device_class import render_device_class
from controller.render.spec import ProjectSpec
from tests.cluster.controller.conftest import controller_settings  # noqa: F401 (fixture)
from tests.helpers.celery_worker import worker  # noqa: F401 (fixture: test_gpu_service)
from tests.helpers.skips import CORE_LIBRARY
from tranche.products import ProductSpec

REPO = Path(__file__).resolve().parents[3]
DRIVER = "gpu.tranche.dev"
V100 = "Tesla V100-PCIE-32GB"


@dataclass
class Agent:
    node: str
    home: Path
    log: Path
    process: subprocess.Popen

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"--- agent {self.node} log (last {lines} lines) ---\n" + "\n".join(
            text.splitlines()[-lines:]
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def start_agent(kube_cluster) -> Iterator[Callable[..., Agent]]:
    """Factory: start one simulated agent per call; all are stopped at teardown."""
    started: list[Agent] = []
    root = Path(tempfile.mkdtemp(prefix="tr-ag-"))

    def _start(node: str, *args: str, interval: float = 1.0) -> Agent:
        home = root / f"{node}.{len(started)}"  # two agents may be started for one node
        home.mkdir(parents=True)
        log = root / f"{node}.{len(started)}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "nodeagent", "run", "--node", node, "--simulate",
                 "--core-lib", str(CORE_LIBRARY),
                 "--kubeconfig", str(kube_cluster.kubeconfig), "--state-dir", str(home),
                 "--kubelet-dir", str(home / "kubelet"), "--cdi-dir", str(home / "cdi"),
                 "--interval", str(interval), *args],
                cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        agent = Agent(node, home, log, proc)
        started.append(agent)
        return agent

    yield _start
    for agent in started:
        agent.stop()


@pytest.fixture(scope="module")
def product(kube_cluster) -> Iterator[ProductSpec]:
    """A V100 8 GiB / 25 % product of the module's own (the real-node modules). Its DeviceClass
    has no labels, so no reconcile elsewhere in the session prunes it."""
    spec = ProductSpec(
        device_class=f"tranche-v100-8g-m{secrets.token_hex(2)}",
        gpu_name=V100, memory_mib=8192, compute_percent=25,
    )  # fmt: skip
    api = client.ResourceV1Api(kube_cluster.api_client)
    body = render_device_class(spec)
    body["metadata"]["labels"] = {}
    api.create_device_class(body)
    yield spec
    try:
        api.delete_device_class(spec.device_class)
    except ApiException as exc:
        if exc.status != 404:  # a reconcile elsewhere in the session may have pruned it
            raise


@pytest.fixture
def products(kube_cluster) -> Iterator[Callable[..., ProductSpec]]:
    """Factory: `products(memory_mib, compute_percent)` -> a product whose DeviceClass exists."""
    api = client.ResourceV1Api(kube_cluster.api_client)
    made: list[str] = []
    tag = secrets.token_hex(2)

    def _make(memory_mib: int = 8192, compute_percent: int = 25) -> ProductSpec:
        name = f"tranche-v100-{memory_mib // 1024}g-{compute_percent}-t{tag}"
        product = ProductSpec(
            device_class=name,
            gpu_name=V100,
            memory_mib=memory_mib,
            compute_percent=compute_percent,
        )
        api.create_device_class(render_device_class(product))
        made.append(name)
        return product

    yield _make
    for name in made:
        try:
            api.delete_device_class(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def create_template(api_client, namespace: str, product: ProductSpec) -> None:
    """The documented ResourceClaimTemplate (the controller's renderer) in `namespace`."""
    spec = ProjectSpec(project_id=0, namespace=namespace, organization="test", project="test")
    body = render_claim_template(spec, product)
    client.ResourceV1Api(api_client).create_namespaced_resource_claim_template(namespace, body)


def create_pod(
    api_client,
    namespace: str,
    name: str,
    product: ProductSpec,
    *,
    nodes: list[str],
    annotations: dict[str, str] | None = None,
) -> None:
    """A pod claiming one slice through the product's template, kept to `nodes`."""
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}
                        ]
                    }
                ]
            }
        }
    }
    client.CoreV1Api(api_client).create_namespaced_pod(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {
                "affinity": affinity,
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
                ],
                "resourceClaims": [
                    {"name": "gpu", "resourceClaimTemplateName": product.device_class}
                ],
            },
        },
    )


def claim_of_pod(api_client, namespace: str, pod: str) -> dict | None:
    """The pod's generated ResourceClaim as JSON (None until it exists)."""
    p = client.CoreV1Api(api_client).read_namespaced_pod(pod, namespace)
    names = [s.resource_claim_name for s in (p.status.resource_claim_statuses or [])]
    if not names or not names[0]:
        return None
    resp = client.ResourceV1Api(api_client).read_namespaced_resource_claim(
        names[0], namespace, _preload_content=False
    )
    return json.loads(resp.data)


def allocation_of(api_client, namespace: str, pod: str) -> dict | None:
    """The single device result of the pod's claim, once allocated."""
    claim = claim_of_pod(api_client, namespace, pod)
    results = (((claim or {}).get("status") or {}).get("allocation") or {}).get("devices", {})
    results = results.get("results") or []
    return results[0] if results else None


def describe_pod(api_client, namespace: str, pod: str) -> str:
    """Conditions and events of a pod, for failure messages."""
    core = client.CoreV1Api(api_client)
    try:
        p = core.read_namespaced_pod(pod, namespace)
    except ApiException as exc:
        return f"pod {namespace}/{pod}: {exc.status} {exc.reason}"
    lines = [f"pod {namespace}/{pod}: phase {p.status.phase}, node {p.spec.node_name}"]
    for c in p.status.conditions or []:
        lines.append(f"  condition {c.type}={c.status} {c.reason or ''}: {c.message or ''}")
    events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}")
    for e in events.items:
        lines.append(f"  event {e.type} {e.reason}: {e.message}")
    return "\n".join(lines)


def agent_slices(api_client, nodes: list[str]) -> list[dict]:
    resp = client.ResourceV1Api(api_client).list_resource_slice(
        field_selector=f"spec.driver={DRIVER}", _preload_content=False
    )
    return [s for s in json.loads(resp.data)["items"] if s["spec"]["nodeName"] in nodes]
