"""`python -m nodeagent run --node NAME [--portal ws://…/ws/agent/ --token-file F]
[--kubeconfig K] [--simulate]`: one node agent. See `nodeagent.agent`.

`python -m nodeagent fleet --node-selector tranche.dev/fleet=NAME [--kubeconfig K]`: the
ResourceSlices of every simulated node the selector matches, from one process (benchmarks at
fleet size). See `nodeagent.sim.fleet`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from nodeagent.agent import CORE_LIB, PUBLISH_EVERY, Options, run
from nodeagent.compute_watch import DEFAULT_TOLERANCE_POINTS, DEFAULT_WINDOW_S
from nodeagent.throttle import CGROUP_ROOT

METRICS_PORT = 9400  # the agent's /metrics, on by default (docs/metrics.md)


@dataclass(frozen=True)
class FleetOptions:
    selector: str
    kubeconfig: Path | None
    model: str
    gpus_per_node: int
    interval: float


def _fleet_parser(sub) -> None:
    f = sub.add_parser("fleet", help="publish the slices of many simulated nodes from one process")
    f.add_argument(
        "--node-selector", required=True, help="the fleet's nodes, e.g. tranche.dev/fleet=bench"
    )
    f.add_argument("--kubeconfig", type=Path, help="default: in-cluster / $KUBECONFIG")
    f.add_argument(
        "--sim-model",
        default="Tesla V100-PCIE-32GB",
        help="GPU model of a node without a tranche.dev/sim-gpu-model annotation",
    )
    f.add_argument("--gpus-per-node", type=int, default=8,
                   help="GPUs of a node without a tranche.dev/gpu-count label")  # fmt: skip
    f.add_argument("--interval", type=float, default=PUBLISH_EVERY,
                   help="seconds between passes (lease renewal, repair)")  # fmt: skip


def parse(argv: list[str] | None = None) -> Options | FleetOptions:
    p = argparse.ArgumentParser(prog="python -m nodeagent")
    sub = p.add_subparsers(dest="command", required=True)
    _fleet_parser(sub)
    r = sub.add_parser("run", help="run the agent for one node")
    r.add_argument("--node", required=True, help="Kubernetes node name (= DRA pool name)")
    r.add_argument("--portal", help="websocket URL, e.g. ws://127.0.0.1:8000/ws/agent/")
    r.add_argument("--token-file", type=Path, help="file holding this node's portal token")
    r.add_argument("--kubeconfig", type=Path, help="default: in-cluster / $KUBECONFIG")
    r.add_argument(
        "--simulate",
        action="store_true",
        help="simgpu plays the driver (the dev cluster's real nodes; kwok nodes)",
    )
    r.add_argument("--state-dir", type=Path, help="default /var/lib/tranche/<node>")
    r.add_argument("--kubelet-dir", type=Path, help="default /var/lib/kubelet")
    r.add_argument("--cdi-dir", type=Path, help="default /var/run/cdi")
    r.add_argument(
        "--core-lib",
        type=Path,
        default=Path(os.environ.get("TRANCHE_CORE_LIB", CORE_LIB)),
        help=f"the interception core (libtranche.so); default $TRANCHE_CORE_LIB or {CORE_LIB}",
    )
    r.add_argument(
        "--simgpu-dir",
        type=Path,
        help="with --simulate: simgpu's libraries (default: simgpu/ beside --core-lib, as "
        "`make -C nodeagent/native` builds them)",
    )
    r.add_argument("--sim-gpus", type=int, default=4)
    r.add_argument("--sim-model", default="Tesla V100-PCIE-32GB")
    r.add_argument(
        "--metrics-port",
        type=int,
        default=METRICS_PORT,
        help=f"/metrics port (default {METRICS_PORT}, on by default; 0: none)",
    )
    r.add_argument("--metrics-addr", default="127.0.0.1",
                   help="address /metrics listens on (chart: 0.0.0.0 with a token)")  # fmt: skip
    r.add_argument("--metrics-token-file", type=Path, default=None,
                   help="/metrics answers only `Authorization: Bearer <its text>`")  # fmt: skip
    r.add_argument("--interval", type=float, default=1.0, help="status period in seconds")
    r.add_argument("--no-backstop", dest="backstop", action="store_false",
                   help="report, but do not stop, processes over their cap or on a GPU "
                        "their pod has no claim on")  # fmt: skip
    r.add_argument("--tolerance-mib", type=int, default=256)
    r.add_argument("--compute-window", type=float, default=DEFAULT_WINDOW_S,
                   help="seconds over which a claim's NVML utilisation is averaged against "
                        "its compute share")  # fmt: skip
    r.add_argument("--compute-tolerance", type=float, default=DEFAULT_TOLERANCE_POINTS,
                   help="percentage points over its share a claim may average over the "
                        "window before its pods are throttled to the share")  # fmt: skip
    r.add_argument("--cgroup-root", type=Path, default=CGROUP_ROOT,
                   help="the host's cgroup mount, where the compute backstop freezes "
                        "pods held to their share (the chart's: /host/sys/fs/cgroup)")  # fmt: skip
    r.add_argument("--kernel-log", type=Path, default=Path("/dev/kmsg"),
                   help="where the driver logs XIDs with their process (with --simulate: "
                        "simgpu-fault's simulated log beside SIMGPU_STATE)")  # fmt: skip
    r.add_argument("--health-check-every", type=float, default=1.0,
                   help="seconds between checks that each GPU still answers NVML")  # fmt: skip
    a = p.parse_args(argv)
    if a.command == "fleet":
        return FleetOptions(a.node_selector, a.kubeconfig, a.sim_model, a.gpus_per_node, a.interval)
    state = a.state_dir or Path("/var/lib/tranche") / a.node
    return Options(
        node=a.node,
        portal=a.portal,
        token_file=a.token_file,
        kubeconfig=a.kubeconfig,
        simulate=a.simulate,
        state_dir=state,
        kubelet_dir=a.kubelet_dir or Path("/var/lib/kubelet"),
        cdi_dir=a.cdi_dir or Path("/var/run/cdi"),
        core_lib=a.core_lib,
        simgpu_dir=(a.simgpu_dir or a.core_lib.parent / "simgpu") if a.simulate else None,
        sim_gpus=a.sim_gpus,
        sim_model=a.sim_model,
        metrics_port=a.metrics_port,
        metrics_addr=a.metrics_addr,
        metrics_token_file=a.metrics_token_file,
        interval=a.interval,
        backstop=a.backstop,
        tolerance_mib=a.tolerance_mib,
        kernel_log=a.kernel_log,
        health_check_every=a.health_check_every,
        compute_window_s=a.compute_window,
        compute_tolerance_points=a.compute_tolerance,
        cgroup_root=a.cgroup_root,
    )


def main() -> None:
    logging.basicConfig(
        level=os.environ.get("TRANCHE_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    opts = parse()
    if isinstance(opts, FleetOptions):
        run_fleet(opts)
        return
    if not opts.core_lib.is_file():
        raise SystemExit(
            f"nodeagent: the interception core is not at {opts.core_lib}: install it there, or "
            "pass --core-lib (or set TRANCHE_CORE_LIB) to where libtranche.so is"
        )
    from nodeagent import profiling

    with profiling.session():  # TRANCHE_PROFILE=<file>: a cProfile of the agent's own work
        asyncio.run(run(opts))


def run_fleet(opts: FleetOptions) -> None:
    """Publish for the fleet until SIGTERM/SIGINT, then give the leases back."""
    import signal
    import threading

    from nodeagent.agent import api_client
    from nodeagent.sim.fleet import FleetPublisher

    api = api_client(opts.kubeconfig)
    fleet = FleetPublisher(api, opts.selector, model=opts.model, gpus_per_node=opts.gpus_per_node)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    logging.getLogger("nodeagent.fleet").info("fleet publisher for nodes %s", opts.selector)
    fleet.run(stop, opts.interval)


if __name__ == "__main__":
    main()
