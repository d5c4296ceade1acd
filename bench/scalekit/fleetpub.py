"""The fleet publisher's own cost: one `python -m nodeagent fleet` process renewing the
ResourceSlices of 125 kwok nodes x 8 simulated GPUs (half V100, half A100).

What bench/scale.py calls:
- `create_fleet_nodes(api, fleet, count, model, gpus)` (deploy/devcluster/nodes.py), once per
  model with its own `prefix`, to make the nodes;
- `start_fleet_publisher(kubeconfig, fleet, log)` -> the process (`fleet_argv` of
  deploy/local/agents.py); `stop_fleet_publisher(proc)`: SIGTERM, it gives the leases back;
- `wait_fleet_published(api, nodes)`: until every node's slice is there;
- `measure_agent_cpu(pid, seconds)` (bench/scalekit/agent.py) for its CPU.

Standalone on the dev cluster (`make cluster-up` first):
    .venv/bin/python bench/scalekit/fleetpub.py [--nodes 125] [--runs 3] [--seconds 60]
prints the time until all slices are published, each run's CPU and the median, whether any
slice was rewritten while measured (it must not be), and writes bench/results/fleet_cpu.json.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS = ("Tesla V100-PCIE-32GB", "NVIDIA A100-SXM4-40GB")
GPUS = 8


def start_fleet_publisher(
    kubeconfig: Path, fleet: str, log: Path, interval: float = 10.0
) -> subprocess.Popen:
    """`python -m nodeagent fleet` for the nodes labelled `tranche.dev/fleet=<fleet>`."""
    from deploy.local.agents import fleet_argv

    with open(log, "wb") as out:
        return subprocess.Popen(
            fleet_argv(kubeconfig, fleet, interval=interval),
            cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def stop_fleet_publisher(proc: subprocess.Popen, timeout: float = 60) -> None:
    """SIGTERM: the publisher gives every pool's lease back and exits."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def published(api_client, nodes: list[str]) -> dict[str, str]:
    """Slice name -> resourceVersion of our driver's slices on `nodes` (one LIST)."""
    from kubernetes import client

    from tranche.names import DRIVER

    resp = client.ResourceV1Api(api_client).list_resource_slice(
        field_selector=f"spec.driver={DRIVER}", _preload_content=False
    )
    wanted = set(nodes)
    return {
        s["metadata"]["name"]: s["metadata"]["resourceVersion"]
        for s in json.loads(resp.data)["items"]
        if s["spec"].get("nodeName") in wanted
    }


def wait_fleet_published(api_client, nodes: list[str], timeout: float = 120) -> float:
    """Seconds until every node in `nodes` has its slice; TimeoutError naming how many lack."""
    started = time.monotonic()
    while len(found := published(api_client, nodes)) < len(nodes):
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{len(nodes) - len(found)} of {len(nodes)} slices missing")
        time.sleep(0.5)
    return time.monotonic() - started


def _standalone(count: int, runs: int, seconds: float) -> dict:
    from kubernetes import config

    from bench.scalekit.agent import measure_agent_cpu
    from deploy.devcluster import launcher
    from deploy.devcluster.config import load_settings
    from deploy.devcluster.nodes import create_fleet_nodes, delete_fleet_nodes

    settings = load_settings()
    if not launcher.is_healthy(settings):
        sys.exit("bench fleet: the dev cluster is down; run `make cluster-up` first")
    api = config.new_client_from_config(str(settings.kubeconfig))
    fleet = f"bench-fleet-{secrets.token_hex(2)}"
    log = Path(tempfile.mkdtemp(prefix="tr-fleet-")) / "publisher.log"
    proc = None
    try:
        began = time.monotonic()
        half = count // 2
        nodes = create_fleet_nodes(api, fleet, count - half, MODELS[0], GPUS, prefix=f"{fleet}-v")
        nodes += create_fleet_nodes(api, fleet, half, MODELS[1], GPUS, prefix=f"{fleet}-a")
        made = time.monotonic() - began
        print(f"{count} nodes Ready in {made:.1f}s", flush=True)
        proc = start_fleet_publisher(settings.kubeconfig, fleet, log)
        took = wait_fleet_published(api, nodes)
        print(f"{count} slices published {took:.1f}s after the publisher started", flush=True)
        time.sleep(12)  # past the first renewal pass
        before = published(api, nodes)
        results = []
        for i in range(runs):
            r = measure_agent_cpu(proc.pid, seconds)
            print(f"run {i + 1}: {r}", flush=True)
            results.append(r)
        after = published(api, nodes)
        rewritten = sum(before[k] != after.get(k) for k in before)
        return {
            "nodes": count,
            "gpus": count * GPUS,
            "nodes_ready_s": round(made, 1),
            "published_s": round(took, 1),
            "runs": results,
            "cpu_percent_median": statistics.median(r["cpu_percent"] for r in results),
            "rss_mib_median": statistics.median(r["rss_mib"] for r in results),
            "slices_rewritten_while_measured": rewritten,
        }
    finally:
        if proc is not None:
            stop_fleet_publisher(proc)
        delete_fleet_nodes(api, fleet)
        print(f"fleet publisher log: {log}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=125)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "fleet_cpu.json")
    a = p.parse_args()
    figures = _standalone(a.nodes, a.runs, a.seconds)
    print(json.dumps(figures, indent=1))
    a.output.parent.mkdir(parents=True, exist_ok=True)
    a.output.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
