"""The real node's configs say what this machine kind needs (docs/devcluster.md)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from deploy.devcluster.config import NodeSettings, Ports, Settings
from deploy.devcluster.node.render import (
    cni_network,
    containerd_config,
    kubelet_config,
    node_paths,
)

SETTINGS = Settings(Path("/c"), Path("/s/cluster"), Ports(1, 2, 3, 4, 5, 6))
NODES = NodeSettings("real-gpu", 16210, 16220, 16230, "10.200", "192.0.2.2")


def test_each_node_has_its_own_ports_folders_network_and_cgroup_root() -> None:
    a, b = node_paths(SETTINGS, NODES, 0), node_paths(SETTINGS, NODES, 1)
    assert (a.name, b.name) == ("real-gpu-0", "real-gpu-1")
    assert (a.kubelet_port, b.kubelet_port, b.healthz_port, b.stream_port) == (
        16210, 16211, 16221, 16231,
    )  # fmt: skip
    assert a.root != b.root
    assert a.root.is_relative_to(SETTINGS.state_dir)
    assert (a.subnet, b.subnet, b.bridge, b.cgroup_root) == (
        "10.200.0.0/24", "10.200.1.0/24", "tr200n1", "/tranche-tr200n1",
    )  # fmt: skip


def test_kubelet_runs_on_cgroup_v1_with_runtime_default_seccomp() -> None:
    node = node_paths(SETTINGS, NODES, 0)
    config = kubelet_config(SETTINGS, node)
    assert config["failCgroupV1"] is False
    assert config["syncFrequency"] == "10s"  # a claim the kubelet could not yet read: retried
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["seccompDefault"] is True
    assert config["containerRuntimeEndpoint"] == f"unix://{node.socket}"
    assert config["authentication"]["anonymous"]["enabled"] is False


def test_containerd_applies_cdi_and_restricts_oom_score_adj() -> None:
    node = node_paths(SETTINGS, NODES, 0)
    doc = tomllib.loads(
        containerd_config(node, Path("/usr/sbin/runc"), Path("/usr/lib/cni"), "r/p:1")
    )
    runtime = doc["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["enable_cdi"] is True
    assert runtime["cdi_spec_dirs"] == [str(node.cdi_dir)]
    assert runtime["restrict_oom_score_adj"] is True
    assert doc["root"].startswith(str(node.root))
    assert doc["state"].startswith(str(node.root))
    assert doc["grpc"]["address"] == str(node.socket)


def test_pod_network_never_leaves_the_machine() -> None:
    bridge = cni_network(node_paths(SETTINGS, NODES, 0))["plugins"][0]
    assert bridge["ipMasq"] is False
    assert bridge["isGateway"] is False
    assert bridge["ipam"]["type"] == "host-local"
