"""A failing GPU on the dev cluster's real node is drained by Kubernetes (issue #34).

The session's real-node agent (tests/helpers/realnode.py) watches its simulated GPUs through
NVML events; `simgpu-fault` (SIMULATED) raises the faults. A fatal XID puts a NoExecute device
taint on that GPU in the node's ResourceSlice; kube-controller-manager's device taint eviction
deletes the pods whose claims use it; their Deployments' new pods are allocated another GPU by
the scheduler, which places nothing on the tainted one. An application XID of one process is
told to that pod only, and taints nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

from kubernetes import client

from nodeagent.owners import pod_uid
from tests.cluster.nodeagent.conftest import allocation_of, create_template, describe_pod
from tests.helpers.realnode import pod_body, run_pod
from tests.helpers.skips import SIMGPU_DIR, needs_native_sim
from tests.helpers.wait import wait_for
from tranche.products import ProductSpec

pytestmark = [needs_native_sim]
TAINT_KEY = "tranche.dev/gpu-unhealthy"


def _fault(real_node, *args: object) -> None:
    """simgpu-fault on the real node's simulated GPUs (the agent's simgpu state)."""
    agent = real_node.paths.agent_dir
    env = dict(os.environ, SIMGPU_STATE=str(agent / "simgpu.state"),
               SIMGPU_CONFIG=str(agent / "simgpu.conf"))  # fmt: skip
    subprocess.run([str(SIMGPU_DIR / "simgpu-fault"), *map(str, args)], env=env, check=True)


def _devices(api, node: str) -> dict[str, dict]:
    resp = client.ResourceV1Api(api).list_resource_slice(
        field_selector=f"spec.nodeName={node}", _preload_content=False
    )
    items = json.loads(resp.data)["items"]
    return {d["name"]: d for s in items for d in s["spec"].get("devices", [])}


def _lost_seen(real_node) -> int:
    """How often the agent's health poll has found a GPU not answering, this session."""
    return real_node.log.read_text(errors="replace").count("unhealthy: GPU stopped answering")


def _taints(api, node: str, device: str) -> list[dict]:
    return [t for t in _devices(api, node).get(device, {}).get("taints", [])
            if t["key"] == TAINT_KEY]  # fmt: skip


def _deployment(api, ns: str, product: ProductSpec, node: str) -> None:
    pod = pod_body("llm", product.device_class, node, args=["check"],
                   env={"SAMPLE_ALLOC_MIB": "256"})  # fmt: skip
    pod["spec"]["restartPolicy"] = "Always"
    pod = {"metadata": {"labels": {"app": "llm"}}, "spec": pod["spec"]}
    client.AppsV1Api(api).create_namespaced_deployment(ns, {
        "metadata": {"name": "llm"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "llm"}}, "template": pod},
    })  # fmt: skip


def _running_pod(api, ns: str, exclude: frozenset[str] = frozenset()) -> tuple[str, str] | None:
    """(pod, device) of the namespace's Running pod with an allocated claim, not in `exclude`."""
    for p in client.CoreV1Api(api).list_namespaced_pod(ns, label_selector="app=llm").items:
        if p.metadata.name in exclude or p.metadata.deletion_timestamp:
            continue
        if p.status.phase == "Running":
            result = allocation_of(api, ns, p.metadata.name)
            if result:
                return p.metadata.name, result["device"]
    return None


def _gone_or_leaving(api, ns: str, name: str) -> bool:
    try:
        pod = client.CoreV1Api(api).read_namespaced_pod(name, ns)
    except client.ApiException as exc:
        return exc.status == 404
    return pod.metadata.deletion_timestamp is not None


def _claims_on(api, node: str, device: str) -> list[str]:
    resp = client.ResourceV1Api(api).list_resource_claim_for_all_namespaces(_preload_content=False)
    out = []
    for c in json.loads(resp.data)["items"]:
        results = ((c.get("status") or {}).get("allocation") or {}).get("devices") or {}
        for r in results.get("results") or []:
            if (r["pool"], r["device"]) == (node, device):
                out.append(f"{c['metadata']['namespace']}/{c['metadata']['name']}")
    return out


def test_a_fatal_xid_drains_the_gpu_and_recovery_returns_it(
    kube_cluster, real_node, product, make_namespace
) -> None:
    api, node = kube_cluster.api_client, real_node.name
    tenants = [make_namespace(), make_namespace()]
    for ns in tenants:
        create_template(api, ns, product)
        _deployment(api, ns, product, node)
    first = {}
    for ns in tenants:
        why = lambda ns=ns: f"{ns}'s pod to run\n" + real_node.log_tail()  # noqa: E731
        first[ns] = wait_for(lambda ns=ns: _running_pod(api, ns), 120, why)
    devices = {device for _, device in first.values()}
    assert len(devices) == 1, f"both tenants' slices should share one GPU: {first}"
    (device,) = devices
    index = int(device.removeprefix("gpu-"))
    assert not _taints(api, node, device)

    lost_before = _lost_seen(real_node)
    t0 = time.monotonic()
    _fault(real_node, "xid", index, 79)  # fallen off the bus: stops answering too
    try:
        taint = wait_for(lambda: _taints(api, node, device), 10,
                         lambda: "the taint\n" + real_node.log_tail(), interval=0.05)  # fmt: skip
        tainted = time.monotonic() - t0
        assert taint[0]["effect"] == "NoExecute"
        assert taint[0]["value"] == "xid-79"
        evicted = {}
        for ns, (name, _) in first.items():
            wait_for(lambda ns=ns, name=name: _gone_or_leaving(api, ns, name), 30,
                     lambda ns=ns, name=name: describe_pod(api, ns, name))  # fmt: skip
            evicted[ns] = time.monotonic() - t0
        moved = {}
        for ns, (name, _) in first.items():
            moved[ns] = wait_for(
                lambda ns=ns, name=name: _running_pod(api, ns, frozenset({name})),
                120,
                lambda ns=ns: f"{ns}'s new pod\n" + real_node.log_tail(),
            )
        ran = time.monotonic() - t0
        print(f"\nfatal XID 79 on {device}: tainted after {tainted:.2f} s; pods evicted after "  # noqa: T201
              + ", ".join(f"{v:.2f}" for v in evicted.values())
              + f" s; new pods running after {ran:.2f} s on "
              + ", ".join(d for _, d in moved.values()))  # fmt: skip
        assert tainted <= 2, tainted
        assert max(evicted.values()) <= 10, evicted
        assert all(d != device for _, d in moved.values()), moved
        wait_for(lambda: not _claims_on(api, node, device), 30,
                 lambda: f"no claim left on {device}: {_claims_on(api, node, device)}")  # fmt: skip
        log = real_node.log.read_text(errors="replace")
        for ns, (name, _) in first.items():
            assert f"pod-gpu-failed {ns}/{name}: the GPU your pod ran on failed (XID 79" in log
    finally:
        # A GPU is healthy again once it was reset: it stopped answering and answers again
        # (nodeagent/health.py). A real reset takes far longer than the agent's 1 s poll; with
        # prompt evictions this test can get here first, so the reset waits (bounded) until the
        # poll has seen the GPU stop answering.
        deadline = time.monotonic() + 10
        while _lost_seen(real_node) <= lost_before:
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        _fault(real_node, "recover", index)
    wait_for(lambda: not _taints(api, node, device), 10,
             lambda: "the taint to go after recovery\n" + real_node.log_tail())  # fmt: skip
    print(f"recovered: taint gone after {time.monotonic() - t0:.2f} s")  # noqa: T201


def _host_pid_of(uid: str) -> int | None:
    for entry in os.listdir("/proc"):
        if entry.isdigit() and pod_uid(int(entry)) == uid:
            return int(entry)
    return None


def test_an_application_xid_is_told_to_its_pod_only(
    kube_cluster, real_node, product, make_namespace
) -> None:
    api, node = kube_cluster.api_client, real_node.name
    ns = make_namespace()
    create_template(api, ns, product)
    run_pod(api, ns, "sample", product.device_class, node, args=["check"],
            env={"SAMPLE_ALLOC_MIB": "256"})  # fmt: skip
    core = client.CoreV1Api(api)
    wait_for(lambda: core.read_namespaced_pod("sample", ns).status.phase == "Running"
             and allocation_of(api, ns, "sample"), 120,
             lambda: describe_pod(api, ns, "sample") + real_node.log_tail())  # fmt: skip
    device = allocation_of(api, ns, "sample")["device"]
    uid = core.read_namespaced_pod("sample", ns).metadata.uid
    pid = wait_for(lambda: _host_pid_of(uid), 30, "the pod's process on the host")
    _fault(real_node, "xid", device.removeprefix("gpu-"), 31, pid, "tranche-sample")
    told = f"pod-xid {ns}/sample: a process of your pod (pid {pid}) hit XID 31"
    wait_for(lambda: told in real_node.log.read_text(errors="replace"), 10,
             lambda: "the pod to be told\n" + real_node.log_tail())  # fmt: skip
    log = real_node.log.read_text(errors="replace")
    assert log.count("hit XID 31") == 1, real_node.log_tail()  # nobody else's pod
    tainted = {d: _taints(api, node, d) for d in _devices(api, node)}
    assert not any(tainted.values()), f"{tainted}\n{real_node.log_tail()}"
    pod = core.read_namespaced_pod("sample", ns)
    assert pod.status.phase == "Running"
    assert not pod.metadata.deletion_timestamp
