"""Demo node agents for `make run`: (`real_nodes=True`, what `make run` asks) one per real node
of the dev cluster, whose kubelet and containerd run the pods (4 simulated V100 each); without
real nodes (an operator's cluster through KUBECONFIG, TRANCHE_REAL_NODES=0, tests), 2 kwok nodes
x 4 simulated V100, one agent each, which publish slices and stream status but run nothing.

`commands(state, env, port)` needs the local control plane up (`python -m deploy.devcluster up`);
it creates the kwok nodes (idempotent), rotates each node's portal token into
`.state/agents/<node>.token` (mode 0600) through `manage.py create_node_token`, and returns the
`python -m nodeagent run --simulate` command per node (log `.state/logs/agent-<node>.log`,
metrics on 127.0.0.1:9400+i); `make run` hands them to the supervisor, `start` runs them
detached. Already running agents are kept.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from deploy import supervisor
from deploy.devcluster.node.render import NodePaths

REPO = Path(__file__).resolve().parents[2]
# The core as `make -C nodeagent/native` builds it (simgpu beside it); an install passes its own.
CORE_LIB = REPO / "nodeagent" / "native" / "build" / "libtranche.so"
PREFIX = "kwok-gpu"
NODE_COUNT = 2
GPUS_PER_NODE = 4
GPU_MODEL = "Tesla V100-PCIE-32GB"


def metrics_base_port() -> int:
    """The first agent's metrics port (agent i listens on base + i; 0: none). Settable with
    TRANCHE_AGENT_METRICS_PORT; by default 1,400 above the portal's port (9400 for 8000), so
    a second stack with its own TRANCHE_PORT gets its own agents' ports too (both
    stacks' agents wanted 9400/9401 and crash-looped)."""
    raw = os.environ.get("TRANCHE_AGENT_METRICS_PORT", "").strip()
    if raw:
        return int(raw)
    return int(os.environ.get("TRANCHE_PORT", "8000")) + 1400


METRICS_BASE_PORT = metrics_base_port()  # what this process's environment says


def node_names(prefix: str = PREFIX) -> list[str]:
    """The demo's kwok nodes: `<prefix>-0` .. (the names create_fake_gpu_nodes gives)."""
    return [f"{prefix}-{i}" for i in range(NODE_COUNT)]


def argv(
    node: str,
    index: int,
    state: Path,
    kubeconfig: Path,
    port: int | None,
    *,
    metrics_base: int = 0,
    gpus: int = GPUS_PER_NODE,
    real: NodePaths | None = None,
) -> list[str]:
    """The agent command line for one demo node (pure); port None: no portal stream;
    metrics_base 0: no metrics endpoint; real: a real node of the dev cluster (its kubelet
    and containerd run the pods; on a kwok node nothing runs them)."""
    home = state / "agents" / node
    dirs = ["--state-dir", str(home), "--kubelet-dir", str(home / "kubelet"),
            "--cdi-dir", str(home / "cdi")]  # fmt: skip
    if real is not None:
        dirs = ["--state-dir", str(real.agent_dir), "--kubelet-dir", str(real.kubelet_dir),
                "--cdi-dir", str(real.cdi_dir)]  # fmt: skip
    portal = (
        ["--portal", f"ws://127.0.0.1:{port}/ws/agent/",
         "--token-file", str(state / "agents" / f"{node}.token")]
        if port is not None else []
    )  # fmt: skip
    return [
        sys.executable, "-m", "nodeagent", "run",
        "--node", node,
        "--simulate",
        "--core-lib", str(CORE_LIB),
        "--sim-gpus", str(gpus),
        "--kubeconfig", str(kubeconfig),
        *portal,
        *dirs,
        "--metrics-port", str(metrics_base + index if metrics_base else 0),
    ]  # fmt: skip


def fleet_argv(
    kubeconfig: Path,
    fleet: str,
    *,
    interval: float = 10.0,
    gpu_model: str = GPU_MODEL,
    gpus_per_node: int = 8,
) -> list[str]:
    """The command line of one fleet publisher (pure): the ResourceSlices of every node
    labelled `tranche.dev/fleet=<fleet>` (deploy.devcluster.nodes.create_fleet_nodes makes
    them; each node's own model annotation and GPU count label win over `gpu_model` and
    `gpus_per_node`). Stop it with SIGTERM: it gives the pools' leases back and exits."""
    from deploy.devcluster.nodes import FLEET_LABEL, label_value

    return [
        sys.executable, "-m", "nodeagent", "fleet",
        "--kubeconfig", str(kubeconfig),
        "--node-selector", f"{FLEET_LABEL}={label_value(fleet)}",
        "--sim-model", gpu_model,
        "--gpus-per-node", str(gpus_per_node),
        "--interval", str(interval),
    ]  # fmt: skip


def commands(
    state: Path,
    env: dict[str, str],
    port: int,
    prefix: str = PREFIX,
    metrics_base: int | None = None,
    *,
    skip: set[str] = frozenset(),
    real_nodes: bool = False,
) -> dict[str, list[str]]:
    """Process name (`agent-<node>`) -> command line of each demo agent, once its node
    exists and its portal token is issued; {} when the control plane is down. Agents named in
    `skip` (already running) keep their token: rotating it would lock them out.
    """
    from kubernetes import config

    from deploy.devcluster import launcher
    from deploy.devcluster.config import load_settings
    from deploy.devcluster.nodes import create_fake_gpu_nodes

    external = env.get("KUBECONFIG", "")
    if external:
        # An operator's own cluster: its kwok (if any) is theirs to run; we only add nodes there.
        kubeconfig = Path(external)
    else:
        settings = load_settings()
        if not launcher.is_healthy(settings):
            print("node agents: skipped (control plane down; run `make cluster-up` first)")
            return {}
        kubeconfig = settings.kubeconfig
    if metrics_base is None:
        metrics_base = metrics_base_port()
    found = {}
    targets: list[tuple[str, NodePaths | None]] = []
    real = real_nodes and not external and settings.real_nodes > 0
    if not real:
        # kwok nodes run nothing: they stand in for GPU nodes only where no real node is.
        api = config.new_client_from_config(str(kubeconfig))
        try:
            nodes = create_fake_gpu_nodes(api, NODE_COUNT, GPU_MODEL, prefix=prefix)
        finally:
            api.close()
        targets = [(n, None) for n in nodes]
    else:
        from deploy.devcluster.config import load_node_settings
        from deploy.devcluster.node.render import node_paths

        nodes_settings = load_node_settings()
        targets = [
            (p.name, p)
            for p in (node_paths(settings, nodes_settings, i) for i in range(settings.real_nodes))
        ]
    for i, (node, real_node) in enumerate(targets):
        name = f"agent-{node}"
        if name not in skip:
            res = subprocess.run(
                [sys.executable, str(REPO / "manage.py"), "create_node_token", node, "--rotate",
                 "--output", str(state / "agents" / f"{node}.token")],
                env=env, cwd=REPO, check=False, capture_output=True, text=True,
            )  # fmt: skip
            if res.returncode != 0:
                raise RuntimeError(
                    f"node agent {node}: could not issue its portal token "
                    f"(manage.py create_node_token):\n{res.stderr.strip()}"
                )
        found[name] = argv(
            node, i, state, kubeconfig, port, metrics_base=metrics_base, real=real_node,
        )  # fmt: skip
    return found


def start(
    state: Path,
    env: dict[str, str],
    port: int,
    prefix: str = PREFIX,
    metrics_base: int | None = None,
) -> list[str]:
    """Start the demo agents as detached processes (no restarts: `make run` puts them under the
    supervisor instead); returns one line per agent for the console.

    Another `prefix` (nodes `<prefix>-0`, `<prefix>-1`) and `metrics_base` (0: no metrics
    endpoint) let a test start its own set beside a running demo.
    """
    running = {
        f"agent-{n}"
        for n in node_names(prefix)
        if supervisor.read_pid(state / "run" / f"agent-{n}.pid")
    }
    lines = []
    for name, command in commands(state, env, port, prefix, metrics_base, skip=running).items():
        pid = supervisor.start_detached(name, command, state, env)
        lines.append(f"{name}: pid {pid}, log {state / 'logs' / (name + '.log')}")
    return lines


def stop(state: Path, prefix: str = PREFIX) -> None:
    for node in node_names(prefix):
        supervisor.stop_named(f"agent-{node}", state)
