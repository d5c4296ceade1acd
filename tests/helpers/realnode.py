"""The dev cluster's real node (kubelet + containerd + runc) with its node agent, for the tiers
that run tenants' pods for real: one node and one agent per test session.

`real_node` starts `python -m nodeagent run --simulate` for node 0 of the
local cluster (4 simulated V100s; the kubelet calls its DRA plugin and containerd applies its
CDI spec) and waits until the kubelet registered the plugin; `real_node.streaming_to(portal,
token)` restarts it streaming to a test's portal for the length of a `with`.
`run_pod(...)` creates a pod of the sample tenant image (`deploy/images/sample.py`) claiming one
slice, hardened as the portal's documented manifest is. Loaded as a plugin by tests/conftest.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
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
    kubeconfig: Path
    process: subprocess.Popen | None = None

    def log_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"--- agent of {self.name} ---\n" + "\n".join(text.splitlines()[-lines:])

    def start(self, *extra: str) -> None:
        """Start the agent (`extra`: more `nodeagent run` options) and wait until the kubelet
        registered its DRA plugin again."""
        before = self._registrations()
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "nodeagent", "run", "--node", self.name, "--simulate",
                 "--sim-gpus", "4", "--core-lib", str(CORE_LIBRARY),
                 "--kubeconfig", str(self.kubeconfig), "--state-dir", str(self.paths.agent_dir),
                 "--kubelet-dir", str(self.paths.kubelet_dir), "--cdi-dir", str(self.paths.cdi_dir),
                 "--interval", "0.5", *extra],
                cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        wait_for(
            lambda: self._registrations() > before,
            60,
            lambda: "the kubelet to register the DRA plugin\n" + self.log_tail(),
        )

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    @contextmanager
    def streaming_to(self, portal_url: str, token_file: Path) -> Iterator[None]:
        """The agent restarted to stream this node's status to a portal (the session's agent
        streams nowhere: each test's portal lives only as long as its database), and
        restarted as before afterwards. Prepared claims survive (the agent's checkpoint)."""
        self.stop()
        self.start("--portal", portal_url, "--token-file", str(token_file))
        try:
            yield
        finally:
            self.stop()
            self.start()

    def _registrations(self) -> int:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text.count("kubelet registered plugin")


@contextmanager
def agent_on_real_node(kube_cluster, *extra: str) -> Iterator[RealNode]:
    """Node 0's agent (with `extra` arguments, e.g. a portal stream) for as long as the block
    runs; its slices are dropped and the node takes other pods again afterwards."""
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
    log.write_bytes(b"")
    # Each session starts from healthy GPUs: a test stopped mid-fault leaves no checkpointed
    # failure (nodeagent/health.py) to taint the next session's GPUs.
    (paths.agent_dir / "gpu-health.json").unlink(missing_ok=True)
    node = RealNode(paths.name, paths, log, kube_cluster.kubeconfig)
    try:
        node.start(*extra)
        yield node
    finally:
        node.stop()
        # No agent serves these GPUs any more: drop them, then let the node take pods again.
        _delete_slices(kube_cluster.api_client, paths.name)
        _set_taint(core, paths.name, on=False)


@pytest.fixture(scope="session")
def real_node(kube_cluster) -> Iterator[RealNode]:
    """Node 0 of the local cluster with its agent running (session-wide)."""
    with agent_on_real_node(kube_cluster) as node:
        yield node


def pod_body(
    name: str,
    template: str,
    node: str,
    *,
    args: list[str] | None = None,
    command: list[str] | None = None,
    env: dict[str, str] | None = None,
    memory: str = "512Mi",
    seccomp: bool = True,
    image: str = IMAGE,
) -> dict:
    """A pod of the sample image claiming one slice through `template`, on `node`, hardened as
    the documented manifest (portal/catalog/manifests.py) is; restartPolicy Never. `seccomp`
    False: the pod names no seccomp profile (the kubelet's seccompDefault then decides);
    `template` "": no claim."""
    container: dict = {
        "name": "main",
        "image": image,
        "args": args or [],
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "resources": {"limits": {"memory": memory}, "requests": {"memory": memory, "cpu": "50m"},
                      "claims": [{"name": "gpu"}] if template else []},
    }  # fmt: skip
    if command:
        container["command"] = command
    security = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000}
    if seccomp:
        security["seccompProfile"] = {"type": "RuntimeDefault"}
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
            "securityContext": security,
            "containers": [container],
            "resourceClaims": (
                [{"name": "gpu", "resourceClaimTemplateName": template}] if template else []
            ),
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
