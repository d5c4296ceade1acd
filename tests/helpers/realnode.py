"""The dev cluster's real node (kubelet + containerd + runc) with its node agent, for the tiers
that run tenants' pods for real: one node and one agent per test session.

`real_node` starts `python -m nodeagent run --simulate --no-kubelet-lite` for node 0 of the
local cluster (4 simulated V100s; the kubelet calls its DRA plugin and containerd applies its
CDI spec) and waits until the kubelet registered the plugin and the slices are published.
`run_pod(...)` creates a pod of the sample tenant image (`deploy/images/sample.py`) claiming one
slice, hardened as the portal's documented manifest is. Loaded as a plugin by tests/conftest.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from deploy.devcluster.config import load_node_settings, load_settings
from deploy.devcluster.node.render import NodePaths, node_paths
from deploy.images.sample import IMAGE
from tests.helpers.skips import CORE_LIBRARY
from tests.helpers.wait import wait_for

REPO = Path(__file__).resolve().parents[2]
# While a session's agent publishes the real node's GPUs, only its own pods may land there:
# other cluster tests' pods (no node affinity, images that exist nowhere here) go to kwok.
TAINT = {"key": "tranche.dev/real-node-tests", "value": "true", "effect": "NoSchedule"}
TOLERATION = {"key": TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}


def _set_taint(core: client.CoreV1Api, node: str, on: bool) -> None:
    taints = [t for t in (core.read_node(node).spec.taints or []) if t.key != TAINT["key"]]
    body = [core.api_client.sanitize_for_serialization(t) for t in taints]
    core.patch_node(node, {"spec": {"taints": [*body, TAINT] if on else body}})


def _delete_slices(api: client.ApiClient, node: str) -> None:
    resource = client.ResourceV1Api(api)
    for item in resource.list_resource_slice(field_selector=f"spec.nodeName={node}").items:
        resource.delete_resource_slice(item.metadata.name)


@dataclass
class RealNode:
    name: str
    paths: NodePaths
    log: Path
    process: subprocess.Popen

    def log_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"--- agent of {self.name} ---\n" + "\n".join(text.splitlines()[-lines:])


@pytest.fixture(scope="session")
def real_node(kube_cluster) -> Iterator[RealNode]:
    """Node 0 of the local cluster with its agent running (session-wide)."""
    if os.environ.get("KUBECONFIG"):
        pytest.skip("real nodes belong to the local dev cluster (KUBECONFIG names another)")
    settings = load_settings()
    if not settings.real_nodes:
        pytest.fail("TRANCHE_REAL_NODES=0: the real-node tests need the dev cluster's node 0")
    paths = node_paths(settings, load_node_settings(), 0)
    core = client.CoreV1Api(kube_cluster.api_client)
    wait_for(lambda: core.list_node(field_selector=f"metadata.name={paths.name}").items, 60,
             f"the kubelet of {paths.name} to register its node")  # fmt: skip
    _set_taint(core, paths.name, on=True)
    log = paths.root / "agent.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nodeagent", "run", "--node", paths.name, "--simulate",
             "--no-kubelet-lite", "--sim-gpus", "4", "--core-lib", str(CORE_LIBRARY),
             "--kubeconfig", str(kube_cluster.kubeconfig), "--state-dir", str(paths.agent_dir),
             "--kubelet-dir", str(paths.kubelet_dir), "--cdi-dir", str(paths.cdi_dir),
             "--interval", "0.5"],
            cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    node = RealNode(paths.name, paths, log, proc)
    try:
        wait_for(
            lambda: "kubelet registered plugin" in log.read_text(errors="replace"),
            60,
            lambda: "the kubelet to register the DRA plugin\n" + node.log_tail(),
        )
        yield node
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        # No agent serves these GPUs any more: drop them, then let the node take pods again.
        _delete_slices(kube_cluster.api_client, paths.name)
        _set_taint(core, paths.name, on=False)


def pod_body(
    name: str,
    template: str,
    node: str,
    *,
    args: list[str] | None = None,
    command: list[str] | None = None,
    env: dict[str, str] | None = None,
    memory: str = "512Mi",
) -> dict:
    """A pod of the sample image claiming one slice through `template`, on `node`, hardened as
    the documented manifest (portal/catalog/manifests.py) is; restartPolicy Never."""
    container: dict = {
        "name": "main",
        "image": IMAGE,
        "args": args or [],
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "resources": {"limits": {"memory": memory}, "requests": {"memory": memory, "cpu": "50m"},
                      "claims": [{"name": "gpu"}]},
    }  # fmt: skip
    if command:
        container["command"] = command
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "restartPolicy": "Never",
            "tolerations": [TOLERATION],
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "runAsGroup": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [container],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        },
    }


def run_pod(api: client.ApiClient, namespace: str, name: str, template: str, node: str,
            **kw) -> None:  # fmt: skip
    """Create `pod_body(...)` in `namespace`."""
    body = pod_body(name, template, node, **kw)
    client.CoreV1Api(api).create_namespaced_pod(namespace, body)


def container_state(api: client.ApiClient, namespace: str, name: str) -> dict:
    """The pod's first container state as JSON ({} before the kubelet reports one)."""
    pod = client.CoreV1Api(api).read_namespaced_pod(name, namespace)
    statuses = (pod.status and pod.status.container_statuses) or []
    if not statuses or statuses[0].state is None:
        return {}
    return api.sanitize_for_serialization(statuses[0].state)


def terminated(api: client.ApiClient, namespace: str, name: str) -> dict | None:
    return container_state(api, namespace, name).get("terminated")


def logs(api: client.ApiClient, namespace: str, name: str) -> str:
    try:
        return client.CoreV1Api(api).read_namespaced_pod_log(name, namespace) or ""
    except client.ApiException:
        return ""
