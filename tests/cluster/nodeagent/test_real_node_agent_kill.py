"""Issue #30, acceptance 5's tail on the real node: the node agent SIGKILLed while a tenant's
container runs leaves no process of its own behind, the container keeps running under
containerd (it belongs to the runtime, not to the agent), and the restarted agent takes the
prepared claim back from its checkpoint: the same share, no second preparation, the pod's slice
reported once.

Before (issue #30, simulation): the killed agent's workloads were orphaned (own process groups,
parent 1) and kept running beside the new ones; the slice counted both.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import urllib.request
from pathlib import Path

from kubernetes import client

from deploy.devcluster.node import run as node_run
from tests.cluster.nodeagent.conftest import describe_pod
from tests.cluster.nodeagent.test_real_node import pod_in  # noqa: F401  (fixture)
from tests.helpers.portal import free_port
from tests.helpers.realnode import REPO, logs
from tests.helpers.skips import needs_native_sim
from tests.helpers.wait import wait_for

pytestmark = [needs_native_sim]
MIB = 1024**2


def _procs() -> dict[int, tuple[int, bytes]]:
    """pid -> (parent pid, command line) of every process."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                found[int(entry.name)] = (ppid, (entry / "cmdline").read_bytes())
            except OSError:
                continue
    return found


def _descendants(root: int) -> set[int]:
    procs, found, todo = _procs(), set(), [root]
    while todo:
        parent = todo.pop()
        kids = {pid for pid, (ppid, _) in procs.items() if ppid == parent} - found
        found |= kids
        todo.extend(kids)
    return found


def _agents_of(state_dir: Path) -> list[int]:
    """Processes running `nodeagent run ... --state-dir <state_dir>` (other worktrees' agents
    serve nodes of the same name on their own clusters: the state folder is this node's)."""
    flag = b"\0--state-dir\0" + str(state_dir).encode() + b"\0"
    return [pid for pid, (_, cmd) in _procs().items() if b"nodeagent\0run\0" in cmd and flag in cmd]


def _pod_pids(node, uid: str) -> set[int]:
    """Processes in the pod's cgroup (cgroupfs: a `pod<uid>` folder under the node's roots)."""
    pids: set[int] = set()
    for top in node_run.cgroup_dirs(node):
        for folder in top.rglob(f"pod{uid}") if top.exists() else ():
            for procs in folder.rglob("cgroup.procs"):
                pids |= {int(p) for p in procs.read_text().split()}
    return pids


def _claims(agent_dir: Path) -> dict:
    path = agent_dir / "checkpoint.json"
    return json.loads(path.read_text()).get("claims", {}) if path.exists() else {}


def _slice_series(port: int, namespace: str) -> list[float]:
    """The agent's tranche_slice_memory_used_bytes samples of `namespace` (one per pod/GPU)."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read()
    except OSError:
        return []
    pattern = rf'^tranche_slice_memory_used_bytes\{{[^}}]*namespace="{namespace}"[^}}]*\}} (\S+)$'
    return [float(v) for v in re.findall(pattern, text.decode(), re.M)]


def test_killed_agent_leaves_nothing_and_its_restart_adopts_the_claim(
    kube_cluster,
    real_node,
    pod_in,  # noqa: F811
) -> None:
    api = kube_cluster.api_client
    core = client.CoreV1Api(api)
    ns, name = pod_in(["check"], env={"SAMPLE_ALLOC_MIB": "1024"})
    wait_for(lambda: "computing with 1024 MiB" in logs(api, ns, name), 90,
             lambda: describe_pod(api, ns, name) + real_node.log_tail())  # fmt: skip

    def started() -> client.V1Pod | None:
        """The pod once the API holds its container's id (the kubelet's status write can
        follow the container's first log lines)."""
        pod = core.read_namespaced_pod(name, ns)
        statuses = pod.status.container_statuses or []
        return pod if statuses and statuses[0].container_id else None

    pod = wait_for(started, 30, lambda: describe_pod(api, ns, name))
    container_id = pod.status.container_statuses[0].container_id
    in_pod = _pod_pids(real_node.paths, pod.metadata.uid)
    assert in_pod, f"no process found in the cgroup of pod {pod.metadata.uid}"
    claims = _claims(real_node.paths.agent_dir)
    (mine,) = [uid for uid, c in claims.items() if c["namespace"] == ns]

    agent = real_node.process
    children = _descendants(agent.pid)  # the agent starts none on a real node; checked anyway
    agent.send_signal(signal.SIGKILL)
    agent.wait(10)
    live = set(_procs())
    assert not children & live, f"processes the agent started outlived it: {children & live}"
    assert _agents_of(real_node.paths.agent_dir) == [], "another agent of the node still runs"
    assert in_pod <= live, f"container processes gone with the agent: {in_pod - live}"
    state = core.read_namespaced_pod(name, ns).status.container_statuses[0]
    assert state.state.running, state
    assert state.container_id == container_id, state

    port = free_port()
    registered = real_node.log.read_text(errors="replace").count("kubelet registered plugin")
    with open(real_node.log, "ab") as out:
        real_node.process = subprocess.Popen(
            [*agent.args, "--metrics-port", str(port)], cwd=REPO,
            env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    wait_for(
        lambda: real_node.log.read_text(errors="replace").count("kubelet registered plugin")
        > registered, 60, lambda: "the kubelet to register the restarted agent's plugin\n"
        + real_node.log_tail(),
    )  # fmt: skip
    series = wait_for(lambda: _slice_series(port, ns), 30,
                      lambda: "the restarted agent to report the pod's slice\n"
                      + real_node.log_tail())  # fmt: skip
    assert len(series) == 1, f"the pod's slice reported {len(series)} times: {series}"
    # 1024 MiB and the context's charge once; the doubled slice (old and new workload
    # both counted) was 2,648 MiB for a 1,324 MiB one.
    assert 1024 * MIB <= series[0] < 2048 * MIB, series
    after = _claims(real_node.paths.agent_dir)
    assert after[mine] == claims[mine], "the claim was prepared again after the restart"
    assert [u for u, c in after.items() if c["namespace"] == ns] == [mine]
    assert _pod_pids(real_node.paths, pod.metadata.uid) == in_pod, "the container was restarted"
    state = core.read_namespaced_pod(name, ns).status.container_statuses[0]
    assert state.restart_count == 0, state
    assert state.container_id == container_id, state
    print(  # noqa: T201
        f"agent SIGKILLed: {len(children)} child process(es) of its own, none left; "
        f"{len(in_pod)} container process(es) kept running; restart re-adopted claim {mine} "
        f"(one slice series, {series[0] / MIB:.0f} MiB)"
    )
