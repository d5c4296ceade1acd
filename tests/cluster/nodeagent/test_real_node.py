"""Tenants' pods on the dev cluster's real node: real kubelet, containerd and runc; our DRA
plugin prepares the claim and containerd applies our CDI spec (core, /etc/ld.so.preload,
read-only slice config, region, simgpu's driver and nvidia-smi, one device file per GPU).

One real node and one agent serve the whole session (tests/helpers/realnode.py); each test
runs a pod of the sample tenant image (deploy/images/sample.py) in a mode of its own.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import subprocess
from pathlib import Path

import pytest
from kubernetes import client

from deploy.devcluster.config import load_node_settings, load_settings
from deploy.devcluster.launcher import node_images
from deploy.devcluster.node import run as node_run
from tests.cluster.nodeagent.conftest import create_template, describe_pod
from tests.helpers.realnode import logs, run_pod, terminated
from tests.helpers.skips import SIMGPU_DIR, needs_native_sim
from tests.helpers.wait import wait_for

pytestmark = [needs_native_sim]


@pytest.fixture
def pod_in(kube_cluster, real_node, product, make_namespace):
    """Factory: run one sample pod in a fresh namespace; returns (namespace, name)."""

    def _run(mode: list[str], **kw) -> tuple[str, str]:
        ns = make_namespace()
        create_template(kube_cluster.api_client, ns, product)
        run_pod(kube_cluster.api_client, ns, "sample", product.device_class, real_node.name,
                args=mode, **kw)  # fmt: skip
        return ns, "sample"

    return _run


def _finished(api, ns: str, name: str, timeout: float, real_node) -> dict:
    return wait_for(
        lambda: terminated(api, ns, name), timeout,
        lambda: "the container to finish\n" + describe_pod(api, ns, name) + real_node.log_tail(),
    )  # fmt: skip


def test_the_container_sees_only_its_gpu(kube_cluster, real_node, pod_in) -> None:
    api = kube_cluster.api_client
    ns, name = pod_in(["gpus"])
    state = _finished(api, ns, name, 90, real_node)
    out = logs(api, ns, name)
    assert state["exitCode"] == 0, out
    assert [line for line in out.splitlines() if line.startswith("GPU ")] == [
        line for line in out.splitlines() if line.startswith("GPU 0: Tesla V100-PCIE-32GB")
    ], out
    assert out.count("GPU ") == 1, out
    assert "cuDeviceGetCount 1" in out, out
    assert "context 0: CUDA_SUCCESS" in out, out
    for other in range(1, 8):
        assert f"context {other}: CUDA_SUCCESS" not in out, out


def test_unshare_is_refused_and_the_core_stays_loaded(kube_cluster, real_node, pod_in) -> None:
    """A pod naming no seccomp profile gets the runtime's default filter (the kubelet's
    seccompDefault: /proc/self/status says Seccomp 2), which refuses unshare(CLONE_NEWUSER);
    /etc/ld.so.preload loads the core into processes started with an empty environment and
    with LD_PRELOAD emptied. (Tenants cannot name another profile: tranche-pod-seccomp.)"""
    api = kube_cluster.api_client
    ns, name = pod_in(["unshare"], seccomp=False)
    _finished(api, ns, name, 90, real_node)
    out = logs(api, ns, name)
    pod = client.CoreV1Api(api).read_namespaced_pod(name, ns)
    assert pod.spec.security_context.seccomp_profile is None  # nothing asked for it
    assert "Seccomp:\t2" in out, out
    assert "unshare -Urm: Operation not permitted" in out, out
    ns, name = pod_in(["core"])
    _finished(api, ns, name, 90, real_node)
    out = logs(api, ns, name)
    for how in ("here", "env -i", "LD_PRELOAD="):
        assert f"{how}: core loaded" in out, out


def _prepared(agent_dir: Path) -> dict:
    path = agent_dir / "checkpoint.json"
    return json.loads(path.read_text()).get("claims", {}) if path.exists() else {}


def test_unprepare_removes_the_claims_files(kube_cluster, real_node, pod_in) -> None:
    api = kube_cluster.api_client
    before = set(_prepared(real_node.paths.agent_dir))
    ns, name = pod_in(["check"], env={"SAMPLE_ALLOC_MIB": "1024"})
    wait_for(lambda: "computing with 1024 MiB" in logs(api, ns, name), 90,
             lambda: describe_pod(api, ns, name) + real_node.log_tail())  # fmt: skip
    (uid,) = set(_prepared(real_node.paths.agent_dir)) - before
    claim = _prepared(real_node.paths.agent_dir)[uid]
    files = [Path(claim["cdi_path"]), Path(claim["config_path"]), Path(claim["region_dir"])]
    assert all(f.exists() for f in files), files
    assert any(Path(claim["region_dir"]).iterdir()), "the core wrote no region"
    client.CoreV1Api(api).delete_namespaced_pod(name, ns, grace_period_seconds=0)
    wait_for(lambda: not any(f.exists() for f in files), 60,
             lambda: f"unprepare to remove {files}\n" + real_node.log_tail())  # fmt: skip


def test_backstop_kills_a_static_binary_around_the_core(kube_cluster, real_node, pod_in) -> None:
    """tranche-bypass never loads the core and takes 9000 MiB on an 8 GiB slice from the
    simulated driver directly; the agent (0.5 s interval) attributes it by its pod cgroup."""
    api = kube_cluster.api_client
    ns, name = pod_in(["9000"], command=["/usr/bin/tranche-bypass"])
    state = _finished(api, ns, name, 90, real_node)
    out = logs(api, ns, name)
    assert "holding 9000 MiB around the core" in out, out
    assert state["exitCode"] == 137, state
    lived = dt.datetime.fromisoformat(state["finishedAt"]) - dt.datetime.fromisoformat(
        state["startedAt"]
    )
    # The kubelet's times have 1 s resolution: 2 intervals (1 s) plus that.
    print(f"bypass killed {lived.total_seconds():.0f} s after its start")  # noqa: T201
    assert lived.total_seconds() <= 2, state


def test_a_stopped_node_leaves_nothing(kube_cluster, real_node) -> None:
    """A second node runs a pod (sandbox, netns, overlay, cgroups), is stopped, and nothing of
    it is left on the machine: what `make stop` does to every node."""
    settings, nodes = load_settings(), load_node_settings()
    index = settings.real_nodes  # past the session's nodes: its own ports, folders and bridge
    node = node_run.start(settings, nodes, index, node_images(settings))
    core = client.CoreV1Api(kube_cluster.api_client)
    try:
        wait_for(lambda: _ready(core, node.name), 60, f"node {node.name} Ready")
        core.create_namespaced_pod("default", {
            "metadata": {"name": f"leftover-{secrets.token_hex(2)}"},
            "spec": {"nodeName": node.name, "restartPolicy": "Never",
                     "automountServiceAccountToken": False,
                     "containers": [{"name": "c", "image": "registry.tranche.dev/sample:1",
                                     "args": ["unshare"]}]},
        })  # fmt: skip
        wait_for(lambda: node_run.cgroup_dirs(node) and any(
            p.name.startswith("pod") for d in node_run.cgroup_dirs(node) if d.exists()
            for p in d.rglob("pod*")), 60, "the pod's cgroup")  # fmt: skip
        assert node_run.leftovers(settings, node), "a running node shows nothing to clean"
    finally:
        node_run.stop(settings, node, quiet=True)
        core.delete_node(node.name)
    assert node_run.leftovers(settings, node) == []


def _ready(core: client.CoreV1Api, name: str) -> bool:
    try:
        conditions = core.read_node(name).status.conditions or []
    except client.ApiException:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _card_mib(real_node) -> int:
    """MiB in use on every simulated GPU of the node: simgpu's own counter through its NVML,
    outside any container and without the core (the ground truth a slice is checked against)."""
    agent = real_node.paths.agent_dir
    env = dict(os.environ, SIMGPU_STATE=str(agent / "simgpu.state"),
               SIMGPU_CONFIG=str(agent / "simgpu.conf"),
               LD_LIBRARY_PATH=str(SIMGPU_DIR))  # fmt: skip
    env.pop("LD_PRELOAD", None)
    query = ["--query-gpu=memory.used", "--format=csv,noheader,nounits"]
    out = subprocess.run(
        [str(SIMGPU_DIR / "nvidia-smi"), *query],
        env=env, capture_output=True, text=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    return sum(int(line) for line in out.split())


def test_a_zombie_leader_chain_holds_at_most_its_slice(
    kube_cluster, real_node, pod_in, product
) -> None:
    """Issue #44, mechanism 1, as a tenant on the real node: six processes 50 ms apart each fill
    the GPU in 1 GiB steps, drop their slot locks and end their main thread while a second
    thread keeps the memory (the leader reads 'Z'). At 083f417 each next link was given the
    slice again; the card must hold no more than the slice plus one step."""
    api = kube_cluster.api_client
    before = _card_mib(real_node)
    ns, name = pod_in(["zombie", "6", "1024"])

    def chain_done() -> str | None:
        text = logs(api, ns, name)
        return text if "zombie chain:" in text else None

    out = wait_for(
        chain_done, 120,
        lambda: "the chain to finish\n" + describe_pod(api, ns, name) + real_node.log_tail(),
    )  # fmt: skip
    held = [int(line.split()[3]) for line in out.splitlines() if line.startswith("link ")]
    card = _card_mib(real_node) - before
    print(f"zombie chain on the real node: links given {held} MiB, card +{card} MiB")  # noqa: T201
    assert len(held) == 6, out
    assert held[0] >= product.memory_mib // 2, out  # the first link really filled its slice
    assert sum(held) <= product.memory_mib, out
    assert card <= product.memory_mib + 1024, (card, out)
    client.CoreV1Api(api).delete_namespaced_pod(name, ns, grace_period_seconds=0)


def test_a_tenant_pod_cannot_write_the_simulated_gpus_faults(kube_cluster, real_node, pod_in):
    """Issue #45, finding 3, as the tenant (uid 1000) in a pod on the real node: the fault ring
    and lost-GPU flags the agent reads (simgpu's "$SIMGPU_STATE.faults") are mounted read-only,
    so a tenant cannot raise an XID that taints a GPU and evicts other tenants' pods."""
    api = kube_cluster.api_client
    ns, name = pod_in(["write", "/var/run/simgpu/state.faults"])
    state = _finished(api, ns, name, 90, real_node)
    out = logs(api, ns, name)
    assert state["exitCode"] == 0, out
    # Present in the pod and refused: on 083f417 the faults lived in the writable state file.
    refused = ("Read-only file system", "Permission denied")
    assert any(f"write /var/run/simgpu/state.faults: {why}" in out for why in refused), out
