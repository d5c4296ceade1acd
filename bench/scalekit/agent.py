"""The node agent's own CPU at a full node: one real simulated agent (kubelet-lite on, 8 GPUs)
on a kwok node running 32 pods, each holding an 8 GiB quarter of a V100 and running the
simulated workload under the interception core.

What bench/scale.py calls (the cluster is its own; namespaces, the DeviceClass and the claim
template are the controller's there):
- `agent_argv(node, state, kubeconfig, port)`: the agent's command line, as the demo starts it;
- `create_slice_pods(api, namespace, device_class, node, count)`: pods claiming one slice each,
  created one at a time, each waited for until allocated and bound;
- `wait_workloads_running(api, namespace, pods, home)`: every pod's workload is running;
- `measure_agent_cpu(pid, seconds)`: the agent process's own CPU (utime + stime of the process,
  all its threads, not its workload children) over `seconds`, and its RSS.

Standalone on the dev cluster (`make cluster-up` first):
    .venv/bin/python bench/scalekit/agent.py [--runs 3] [--seconds 60] [--profile FILE]
prints each run and the median, and writes bench/results/agent_cpu.json.
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
V100 = "Tesla V100-PCIE-32GB"
DEVICE_CLASS = "tranche-v100-8g"
PODS = 32
GPUS = 8
# A workload that holds 4 GiB of its 8 GiB slice and computes 5 % of the time at 10 launches/s.
WORKLOAD = {"tranche.dev/workload-memory-gib": "4", "tranche.dev/workload-duty": "0.05"}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """utime + stime of the process (every thread), children excluded (/proc/<pid>/stat)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": state is field 3
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure_agent_cpu(pid: int, seconds: float) -> dict:
    """The process's own CPU over `seconds` of wall time: {"cpu_percent" (of one core),
    "cpu_seconds", "rss_mib" (at the end), "seconds"}."""
    cpu0, t0 = _cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    cpu1, t1 = _cpu_seconds(pid), time.monotonic()
    used = cpu1 - cpu0
    return {
        "cpu_percent": round(100 * used / (t1 - t0), 3),
        "cpu_seconds": round(used, 3),
        "rss_mib": round(_rss_mib(pid), 1),
        "seconds": round(t1 - t0, 2),
    }


def agent_argv(node: str, state: Path, kubeconfig: Path, port: int | None) -> list[str]:
    """`python -m nodeagent run --simulate --sim-gpus 8` for `node` as deploy/local/agents.py
    starts it (kubelet-lite on); `port`: the portal's, whose token for `node` must be in
    `<state>/agents/<node>.token`; None: no status stream. Its home (claims, CDI, workload
    logs under `pods/`) is `<state>/agents/<node>`."""
    from deploy.local.agents import argv

    return argv(node, 0, state, kubeconfig, port, gpus=GPUS)


def _pod(name: str, device_class: str, node: str, annotations: dict[str, str]) -> dict:
    """A tenant's pod as the documented manifest has it: one slice through the project's claim
    template (named like its class), kept to `node`."""
    on_node = {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
    required = {"nodeSelectorTerms": [{"matchExpressions": [on_node]}]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
            },
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": device_class}],
        },
    }


def _bound(core, resource, namespace: str, name: str) -> bool:
    pod = core.read_namespaced_pod(name, namespace)
    statuses = pod.status.resource_claim_statuses or []
    if not pod.spec.node_name or not statuses or not statuses[0].resource_claim_name:
        return False
    claim = resource.read_namespaced_resource_claim(statuses[0].resource_claim_name, namespace)
    return bool(claim.status and claim.status.allocation)


def _wait(predicate, timeout: float, what: str, interval: float = 0.2):
    from deploy.supervisor import wait_for  # the repository root is on the path by now

    return wait_for(predicate, timeout, what, interval)


def create_slice_pods(
    api_client,
    namespace: str,
    device_class: str,
    node: str,
    count: int = PODS,
    *,
    prefix: str = "slice",
    annotations: dict[str, str] | None = None,
    timeout: float = 60,
) -> list[str]:
    """`count` pods `<prefix>-<i>` on `node`, each claiming one slice of `device_class`; each is
    created after the previous one is allocated and bound (concurrent shares of one device can
    wait minutes in the v1.37.2 scheduler, docs/devcluster.md). Returns their names."""
    from kubernetes import client

    core, resource = client.CoreV1Api(api_client), client.ResourceV1Api(api_client)
    names = []
    for i in range(count):
        name = f"{prefix}-{i}"
        body = _pod(
            name, device_class, node, dict(WORKLOAD if annotations is None else annotations)
        )
        core.create_namespaced_pod(namespace, body)
        _wait(lambda n=name: _bound(core, resource, namespace, n), timeout, f"pod {name} bound")
        names.append(name)
    return names


def wait_workloads_running(
    api_client, namespace: str, pods: list[str], home: Path, timeout: float = 120
) -> None:
    """Until every pod's workload says it runs (its `running` event in the log kubelet-lite
    keeps under `<home>/pods/`)."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    uids = {p: core.read_namespaced_pod(p, namespace).metadata.uid for p in pods}

    def running() -> bool:
        for pod, uid in uids.items():
            log = home / "pods" / f"{namespace}_{pod}_{uid}.log"
            if not log.exists() or '"event": "running"' not in log.read_text():
                return False
        return True

    _wait(running, timeout, f"{len(pods)} workloads running", 1.0)


def _start_agent(
    node: str, state: Path, kubeconfig: Path, portal_port: int | None, profile: str | None
) -> subprocess.Popen:
    if portal_port is not None:  # nobody listens: messages are built and buffered
        (state / "agents").mkdir(parents=True)
        (state / "agents" / f"{node}.token").write_text("bench-no-portal\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if profile:
        env["TRANCHE_PROFILE"] = profile
    with open(state / "agent.log", "wb") as log:
        return subprocess.Popen(
            agent_argv(node, state, kubeconfig, portal_port),
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip


def _measure_runs(pid: int, runs: int, seconds: float) -> list[dict]:
    time.sleep(5)  # let the start-up (prepares, first region reads) settle
    results = []
    for i in range(runs):
        r = measure_agent_cpu(pid, seconds)
        print(f"run {i + 1}: {r}", flush=True)
        results.append(r)
    return results


def _ensure_device_class(resource, body: dict) -> bool:
    """Create the DeviceClass; False if it exists (the controller's, same rendering: kept)."""
    from kubernetes.client.rest import ApiException

    try:
        resource.create_device_class(body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        return False
    return True


def _standalone(runs: int, seconds: float, profile: str | None, portal_port: int | None) -> dict:
    """Node, class, namespace, template, agent and 32 pods on the dev cluster; measured; gone."""
    from kubernetes import client, config

    from controller.render.claim_template import render_claim_template
    from controller.render.device_class import render_device_class
    from controller.render.spec import ProductSpec, ProjectSpec
    from deploy.devcluster import launcher
    from deploy.devcluster.config import load_settings
    from deploy.devcluster.nodes import create_fake_gpu_nodes, delete_fake_nodes

    settings = load_settings()
    if not launcher.is_healthy(settings):
        sys.exit("bench agent: the dev cluster is down; run `make cluster-up` first")
    api = config.new_client_from_config(str(settings.kubeconfig))
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    product = ProductSpec(
        device_class=DEVICE_CLASS, gpu_name=V100, memory_mib=8192, compute_percent=25
    )
    made_class = _ensure_device_class(resource, render_device_class(product))
    tag = secrets.token_hex(2)
    (node,) = create_fake_gpu_nodes(api, 1, V100, prefix=f"bench-agent-{tag}")
    namespace = f"bench-agent-{tag}"
    core.create_namespace({"metadata": {"name": namespace}})
    state = Path(tempfile.mkdtemp(prefix="tr-ba-"))
    agent = None
    try:
        spec = ProjectSpec(project_id=0, namespace=namespace, organization="b", project="b")
        _wait(lambda: core.list_namespaced_service_account(namespace).items, 30, "default SA")
        resource.create_namespaced_resource_claim_template(
            namespace, render_claim_template(spec, product)
        )
        agent = _start_agent(node, state, settings.kubeconfig, portal_port, profile)
        _wait(
            lambda: resource.list_resource_slice(field_selector=f"spec.nodeName={node}").items,
            60,
            "the agent's ResourceSlice",
        )
        started = time.monotonic()
        pods = create_slice_pods(api, namespace, DEVICE_CLASS, node, PODS)
        wait_workloads_running(api, namespace, pods, state / "agents" / node)
        print(f"{PODS} pods running after {time.monotonic() - started:.0f}s", flush=True)
        results = _measure_runs(agent.pid, runs, seconds)
        return {
            "pods": PODS,
            "gpus": GPUS,
            "seconds_per_run": seconds,
            "portal": "unreachable port (messages built)" if portal_port else "none",
            "runs": results,
            "cpu_percent_median": statistics.median(r["cpu_percent"] for r in results),
            "rss_mib_median": statistics.median(r["rss_mib"] for r in results),
        }
    finally:
        core.delete_namespace(namespace, propagation_policy="Background")
        if agent is not None and agent.poll() is None:
            agent.send_signal(signal.SIGTERM)  # stops the workloads, writes the profile
            try:
                agent.wait(timeout=120)
            except subprocess.TimeoutExpired:
                agent.kill()
        delete_fake_nodes(api, [node])
        if made_class:
            resource.delete_device_class(DEVICE_CLASS)
        print(f"agent log: {state / 'agent.log'}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--profile", help="write the agent's cProfile (pstats) to this file")
    p.add_argument("--portal-port", type=int, help="stream to this (unlistened) portal port")
    p.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "agent_cpu.json")
    a = p.parse_args()
    figures = _standalone(a.runs, a.seconds, a.profile, a.portal_port)
    print(json.dumps(figures, indent=1))
    a.output.parent.mkdir(parents=True, exist_ok=True)
    a.output.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
