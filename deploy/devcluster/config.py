"""Settings for the local control plane: versions, paths and loopback ports.

Everything that can vary between machines is read from the environment here, in
one place, so the builder, launcher and test fixtures agree on the same paths.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Release built from the Go proxy. The staging modules in k8s/go.mod are pinned
# to the matching v0.<minor>.<patch>; change both together.
KUBE_VERSION = "v1.37.2"
# Date of the v1.37.2 tag on the proxy; fixed so rebuilds are byte-identical
# and the Go build cache is reused.
KUBE_BUILD_DATE = "2026-10-27T12:01:04Z"
KWOK_VERSION = "v0.8.0"
ETCD_VERSION = "v3.6.16"

REPO_ROOT = Path(__file__).resolve().parents[2]
MODULE_DIR = Path(__file__).resolve().parent

# Label kwok uses to pick the nodes it plays; nodes without it are left alone.
FAKE_NODE_LABEL = ("kwok.x-k8s.io/node", "fake")

# Feature gates passed to every component. They are beta and on by default in
# 1.37, but naming them pins the behaviour Tranche relies on (consumable
# capacity above all) if a release flips a default. GA gates locked to true
# (DynamicResourceAllocation, DRAPrioritizedList, ...) are left out: naming a
# locked gate only logs a warning now and becomes an error once it is removed.
FEATURE_GATES = {
    "DRAConsumableCapacity": True,
    "DRAPartitionableDevices": True,
    "DRADeviceTaints": True,
}


def _env_path(name: str, default: Path) -> Path:
    value = os.environ.get(name)
    return Path(value).expanduser() if value else default


def _env_port(name: str, default: int) -> int:
    value = os.environ.get(name)
    if not value:
        return default
    port = int(value)
    if not 0 < port < 65536:
        raise ValueError(f"{name}={value} is not a TCP port")
    return port


@dataclass(frozen=True)
class Ports:
    """Loopback ports, chosen away from the standard ones (6443, 2379, 10257, ...) and below
    Linux's ephemeral range (32768-60999): a port there can be held in TIME-WAIT by any client
    connection on the machine, and etcd then fails to bind it ("address already in use")."""

    apiserver: int
    etcd_client: int
    etcd_peer: int
    controller_manager: int
    scheduler: int
    kwok: int


@dataclass(frozen=True)
class Settings:
    """Where binaries and state live, and which ports the components use."""

    cache_dir: Path
    state_dir: Path
    ports: Ports
    # Client QPS of the controller manager and the scheduler (burst: twice that); 0 keeps their
    # defaults (20 and 50), which pace a fleet-size burst of pods and claims below what the
    # scheduler itself can allocate (bench/scale.py raises it; TRANCHE_KUBE_CLIENT_QPS).
    client_qps: int = 0
    # Real nodes (kubelet + containerd) started with the control plane: TRANCHE_REAL_NODES in
    # `load_settings` (default 1); 0 for private clusters built directly (benchmarks, fault
    # tests), whose nodes would take the same kubelet ports, bridges and cgroup roots.
    real_nodes: int = 0

    @property
    def bin_dir(self) -> Path:
        return self.cache_dir / f"k8s-{KUBE_VERSION}"

    @property
    def kube_binary(self) -> Path:
        return self.bin_dir / "tranche-k8s"

    @property
    def etcd_binary(self) -> Path:
        return self.bin_dir / "tranche-etcd"

    @property
    def kubectl(self) -> Path:
        return self.bin_dir / "kubectl"

    @property
    def pki_dir(self) -> Path:
        return self.state_dir / "pki"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def etcd_data_dir(self) -> Path:
        return self.state_dir / "etcd"

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def server_url(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    def log_path(self, component: str) -> Path:
        return self.log_dir / f"{component}.log"


@dataclass(frozen=True)
class NodeSettings:
    """The real nodes (kubelet + containerd + runc): their names, base ports and network.

    Node i uses each base port + i and the pod subnet `<net>.<i>.0/24`. Defaults sit away from
    the control plane's ports and below the ephemeral range, like `Ports`."""

    prefix: str
    kubelet_port: int
    healthz_port: int
    stream_port: int
    net: str  # first two octets of the pod subnets, e.g. "10.200"
    ip: str  # the kubelets' address: kubelet refuses a loopback node IP


def _host_ip() -> str:
    """This machine's first non-loopback IPv4 address (TRANCHE_NODE_IP overrides it)."""
    import socket

    for family, _, _, _, addr in socket.getaddrinfo(socket.gethostname(), None):
        if family == socket.AF_INET and not addr[0].startswith("127."):
            return addr[0]
    import subprocess

    for word in subprocess.run(
        ["hostname", "-I"], capture_output=True, text=True, check=False
    ).stdout.split():
        if "." in word and not word.startswith("127."):
            return word
    raise ValueError("no non-loopback IPv4 address for the real nodes: set TRANCHE_NODE_IP")


def load_node_settings() -> NodeSettings:
    """TRANCHE_KUBELET_PORT, TRANCHE_KUBELET_HEALTHZ_PORT, TRANCHE_CONTAINERD_STREAM_PORT,
    TRANCHE_NODE_NET, TRANCHE_NODE_IP (default: this machine's first IPv4 address)."""
    net = os.environ.get("TRANCHE_NODE_NET", "10.200")
    octets = net.split(".")
    if len(octets) != 2 or not all(o.isdigit() and int(o) < 256 for o in octets):
        raise ValueError(f"TRANCHE_NODE_NET={net}: want two octets such as 10.200")
    return NodeSettings(
        prefix=os.environ.get("TRANCHE_REAL_NODE_PREFIX", "real-gpu"),
        kubelet_port=_env_port("TRANCHE_KUBELET_PORT", 16210),
        healthz_port=_env_port("TRANCHE_KUBELET_HEALTHZ_PORT", 16220),
        stream_port=_env_port("TRANCHE_CONTAINERD_STREAM_PORT", 16230),
        net=net,
        ip=os.environ.get("TRANCHE_NODE_IP") or _host_ip(),
    )


def load_settings() -> Settings:
    """Read settings from the environment (TRANCHE_CACHE, TRANCHE_CLUSTER_STATE, *_PORT)."""
    cache = _env_path("TRANCHE_CACHE", Path.home() / ".cache" / "tranche")
    state = _env_path("TRANCHE_CLUSTER_STATE", REPO_ROOT / ".state" / "cluster")
    ports = Ports(
        apiserver=_env_port("TRANCHE_APISERVER_PORT", 16443),
        etcd_client=_env_port("TRANCHE_ETCD_PORT", 12379),
        etcd_peer=_env_port("TRANCHE_ETCD_PEER_PORT", 12380),
        controller_manager=_env_port("TRANCHE_KCM_PORT", 16257),
        scheduler=_env_port("TRANCHE_SCHEDULER_PORT", 16259),
        kwok=_env_port("TRANCHE_KWOK_PORT", 16247),
    )
    qps = int(os.environ.get("TRANCHE_KUBE_CLIENT_QPS", "0") or 0)
    if qps < 0:
        raise ValueError(f"TRANCHE_KUBE_CLIENT_QPS={qps} must be 0 (defaults) or positive")
    real = int(os.environ.get("TRANCHE_REAL_NODES", "1") or 0)
    if real < 0:
        raise ValueError(f"TRANCHE_REAL_NODES={real} must be 0 (none) or more")
    return Settings(cache_dir=cache, state_dir=state, ports=ports, client_qps=qps, real_nodes=real)
