"""Pure configuration of one real node: paths, KubeletConfiguration, containerd, CNI network.

Everything a node writes lives under `<cluster state>/n<index>/` (kubelet root, containerd
root/state/socket, CDI specs, CNI config and addresses, pod logs, the node agent's state), so
nothing lands in the host's /var/lib/kubelet or /run/containerd. Ports and the pod network come
from the environment (config.NodeSettings), offset per node index.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from deploy.devcluster.config import FEATURE_GATES, NodeSettings, Settings

CGROUP_V1_CONTROLLERS = (
    "blkio", "cpu,cpuacct", "cpuset", "devices", "freezer", "hugetlb", "memory", "net_cls,net_prio",
    "perf_event", "pids", "systemd",
)  # fmt: skip
REAL_NODE_LABEL = ("tranche.dev/real-node", "true")


@dataclass(frozen=True)
class NodePaths:
    """One real node's name, ports and folders (pure function of settings and index)."""

    name: str
    index: int
    root: Path
    kubelet_port: int
    healthz_port: int
    stream_port: int
    subnet: str
    bridge: str
    ip: str

    @property
    def kubelet_dir(self) -> Path:
        return self.root / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_state(self) -> Path:
        return self.root / "run"

    @property
    def socket(self) -> Path:
        return self.root / "containerd.sock"

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni"

    @property
    def cni_data_dir(self) -> Path:
        return self.root / "cni-ipam"

    @property
    def agent_dir(self) -> Path:
        return self.root / "agent"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubelet.kubeconfig"

    @property
    def cgroup_root(self) -> str:
        """The kubelet's --cgroup-root: one per node and per dev cluster on this machine."""
        return f"/tranche-{self.bridge}"

    def file(self, name: str) -> Path:
        return self.root / name


def node_paths(settings: Settings, nodes: NodeSettings, index: int) -> NodePaths:
    net = nodes.net
    return NodePaths(
        name=f"{nodes.prefix}-{index}",
        index=index,
        root=settings.state_dir / f"n{index}",
        kubelet_port=nodes.kubelet_port + index,
        healthz_port=nodes.healthz_port + index,
        stream_port=nodes.stream_port + index,
        subnet=f"{net}.{index}.0/24",
        # IFNAMSIZ is 16: "tr" + the second octet + "n" + index stays short and unique per net.
        bridge=f"tr{net.split('.')[-1]}n{index}",
        ip=nodes.ip,
    )


def kubelet_config(settings: Settings, node: NodePaths) -> dict:
    """The KubeletConfiguration (v1beta1) of one node, as a dict ready for YAML/JSON."""
    pki = settings.pki_dir
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # This machine kind mounts cgroup v1 only; kubelet refuses it unless told.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_root,
        "address": node.ip,
        "port": node.kubelet_port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": node.healthz_port,
        "tlsCertFile": str(pki / f"node-{node.name}.crt"),
        "tlsPrivateKeyFile": str(pki / f"node-{node.name}.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{node.socket}",
        "podLogsDir": str(node.pod_logs),
        # Every container gets the runtime's default seccomp profile unless its pod names one
        # (tenant namespaces' admission policy refuses Unconfined).
        "seccompDefault": True,
        "failSwapOn": False,
        "makeIPTablesUtilChains": False,
        "clusterDNS": [],
        "maxPods": 32,
        "serializeImagePulls": False,
        "registerNode": True,
        "nodeStatusReportFrequency": "20s",
        # A pod whose DRA claim the kubelet may not read yet (the node authorizer's graph lags
        # the scheduler's bind by a moment) fails PrepareDynamicResources, and the kubelet
        # (1.37) retries it only at the next resync, not after its 10 s error backoff: the
        # default 1 min kept a replacement pod of a failed GPU 72 s from running.
        "syncFrequency": "10s",
        "shutdownGracePeriod": "0s",
        # A shared development machine: its disk and memory are not this node's to guard.
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "featureGates": dict(FEATURE_GATES),
    }


def kubelet_argv(settings: Settings, node: NodePaths) -> list[str]:
    label = "=".join(REAL_NODE_LABEL)
    return [
        str(settings.bin_dir / "kubelet"),
        f"--config={node.file('kubelet.yaml')}",
        f"--kubeconfig={node.kubeconfig}",
        f"--root-dir={node.kubelet_dir}",
        f"--cert-dir={node.file('kubelet-certs')}",
        f"--hostname-override={node.name}",
        f"--node-ip={node.ip}",
        f"--node-labels={label}",
        "--v=1",
    ]


def containerd_config(node: NodePaths, runc: Path, cni_bin: Path, pause_image: str) -> str:
    """containerd's config (version 3) for one node, as TOML text."""
    q = json.dumps  # TOML basic strings accept JSON string escapes
    return f"""version = 3
root = {q(str(node.containerd_root))}
state = {q(str(node.containerd_state))}
disabled_plugins = [
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs", "io.containerd.nri.v1.nri",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
]

[grpc]
  address = {q(str(node.socket))}

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = {q(str(node.containerd_root / "opt"))}

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = {q(str(node.stream_port))}

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = {q(pause_image)}

[plugins."io.containerd.cri.v1.runtime"]
  enable_cdi = true
  cdi_spec_dirs = [{q(str(node.cdi_dir))}]
  # oom_score_adj cannot be lowered on this machine kind: without this runc fails with
  # "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = [{q(str(cni_bin))}]
  conf_dir = {q(str(node.cni_conf_dir))}
  max_conf_num = 1

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  BinaryName = {q(str(runc))}
  SystemdCgroup = false
"""


def cni_network(node: NodePaths) -> dict:
    """A bridge inside this machine: host-local addresses, no gateway, no masquerade, so no
    route leaves the machine from a pod (platform pods that need the API use the host network)."""
    return {
        "cniVersion": "1.0.0",
        "name": f"tranche-{node.bridge}",
        "plugins": [
            {
                "type": "bridge",
                "bridge": node.bridge,
                "isGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": node.subnet}]],
                    "dataDir": str(node.cni_data_dir),
                },
            }
        ],
    }
