"""Node agents on the real control plane: kwok nodes x 4 simulated V100.

The API server accepts the agents' ResourceSlices; the real scheduler allocates pods using the
documented claim template (controller renderers) onto those devices: 4 x 8 GiB share one GPU, a
fifth goes to another GPU, and with every GPU full the next pod stays Pending. The capacity
request policy holds only the sellable sizes, so every allocation consumes one of them.
Pods are created one at a time, each waited for: concurrent shares of one device can wait
minutes in the v1.37.2 scheduler (docs/devcluster.md).
"""

from __future__ import annotations

import secrets
from collections import Counter

from kubernetes import client
from kubernetes.client.rest import ApiException

from deploy.devcluster.nodes import create_fake_gpu_nodes, delete_fake_nodes
from tests.cluster.nodeagent.conftest import (
    agent_slices,
    allocation_of,
    create_pod,
    create_template,
    describe_pod,
)
from tests.helpers.wait import wait_for


def _nodes(api, count: int) -> list[str]:
    return create_fake_gpu_nodes(api, count, prefix=f"tr-agent-{secrets.token_hex(2)}")


def _place(api, ns: str, name: str, product, *, nodes: list[str], agents) -> tuple[str, str, dict]:
    """Create one pod and wait until its claim is allocated: (pool, device, consumed)."""
    create_pod(api, ns, name, product, nodes=nodes)
    core = client.CoreV1Api(api)

    def placed() -> dict | None:
        # Bound as well as allocated: the next pod is created only after the scheduler has
        # finished with this one (concurrent shares of a device race in v1.37.2).
        result = allocation_of(api, ns, name)
        return result if result and core.read_namespaced_pod(name, ns).spec.node_name else None

    result = wait_for(
        placed,
        60,
        lambda: (
            f"allocation of {name}\n{describe_pod(api, ns, name)}\n"
            + "\n".join(a.log_tail(10) for a in agents)
        ),
    )
    return result["pool"], result["device"], result.get("consumedCapacity") or {}


def _wait_unschedulable(api, ns: str, name: str) -> str:
    core = client.CoreV1Api(api)

    def refused() -> str | None:
        pod = core.read_namespaced_pod(name, ns)
        for c in pod.status.conditions or []:
            if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                return c.message or ""
        return None

    message = wait_for(
        refused, 30, lambda: f"{name} to be unschedulable\n{describe_pod(api, ns, name)}"
    )
    pod = core.read_namespaced_pod(name, ns)
    assert pod.status.phase == "Pending", describe_pod(api, ns, name)
    assert not pod.spec.node_name, describe_pod(api, ns, name)
    assert allocation_of(api, ns, name) is None
    return message


def test_slices_accepted_and_scheduler_packs_8gib_shares(
    kube_cluster, start_agent, products, namespace
):
    api = kube_cluster.api_client
    nodes = _nodes(api, 2)
    try:
        agents = [start_agent(n) for n in nodes]
        slices = wait_for(
            lambda: len(s := agent_slices(api, nodes)) == 2 and s,
            60,
            lambda: "2 ResourceSlices\n" + "\n".join(a.log_tail() for a in agents),
        )
        for s in slices:
            assert len(s["spec"]["devices"]) == 4
            assert all(d["allowMultipleAllocations"] is True for d in s["spec"]["devices"])
            owner = s["metadata"]["ownerReferences"][0]
            assert (owner["kind"], owner["name"]) == ("Node", s["spec"]["nodeName"])
        v100_8g = products(8192, 25)
        create_template(api, namespace, v100_8g)

        def place(i: int, on: list[str]) -> tuple[str, str, dict]:
            return _place(api, namespace, f"p{i}", v100_8g, nodes=on, agents=agents)

        first = [place(i, nodes[:1]) for i in range(5)]
        per_device = Counter((pool, dev) for pool, dev, _ in first)
        assert sorted(per_device.values()) == [1, 4], per_device  # 4 share one GPU, 1 elsewhere
        assert all(used == {"memory": "8Gi", "cores": "25"} for *_, used in first), first

        rest = [place(i, nodes) for i in range(5, 32)]
        per_device = Counter((pool, dev) for pool, dev, _ in first + rest)
        assert len(per_device) == 8, per_device
        assert set(per_device.values()) == {4}, per_device

        create_pod(api, namespace, "one-too-many", v100_8g, nodes=nodes)
        message = _wait_unschedulable(api, namespace, "one-too-many")
        assert "claim" in message, message
    finally:
        delete_fake_nodes(api, nodes)


def test_request_policy_admits_exactly_the_sellable_sizes(
    kube_cluster, start_agent, products, namespace
):
    """Sellable sizes are consumed as asked; a size between two is rounded up to the next
    sellable one (the scheduler applies the policy); a size above all of them never fits."""
    api = kube_cluster.api_client
    nodes = _nodes(api, 1)
    try:
        agent = start_agent(nodes[0])
        (published,) = wait_for(
            lambda: agent_slices(api, nodes), 60, lambda: "the slice\n" + agent.log_tail()
        )
        for device in published["spec"]["devices"]:
            memory, cores = device["capacity"]["memory"], device["capacity"]["cores"]
            assert memory["value"] == "32Gi"
            assert cores["value"] == "100"
            assert memory["requestPolicy"] == {
                "default": "8Gi",
                "validValues": ["8Gi", "16Gi", "32Gi"],
            }
            assert cores["requestPolicy"] == {"default": "25", "validValues": ["25", "50", "100"]}
        cases = [  # (memory MiB, cores %) asked -> consumed
            ((8192, 25), {"memory": "8Gi", "cores": "25"}),
            ((16384, 50), {"memory": "16Gi", "cores": "50"}),
            ((32768, 100), {"memory": "32Gi", "cores": "100"}),
            ((12288, 30), {"memory": "16Gi", "cores": "50"}),
        ]
        for i, ((mib, pct), consumed) in enumerate(cases):
            product = products(mib, pct)
            create_template(api, namespace, product)
            _, _, used = _place(api, namespace, f"size-{i}", product, nodes=nodes, agents=[agent])
            assert used == consumed, (mib, pct, used)
        too_big = products(40960, 100)
        create_template(api, namespace, too_big)
        create_pod(api, namespace, "size-40g", too_big, nodes=nodes)
        _wait_unschedulable(api, namespace, "size-40g")
    finally:
        delete_fake_nodes(api, nodes)


def test_second_agent_for_a_pool_waits_for_the_lease(kube_cluster, start_agent):
    """Two agents for one node never both write its pool; the second takes over when the
    first stops (it gives the lease back), without rewriting an unchanged slice."""
    api = kube_cluster.api_client
    leases = client.CoordinationV1Api(api)
    nodes = _nodes(api, 1)
    lease = f"gpu-tranche-dev-{nodes[0]}"

    def holder() -> str:
        """The lease's holder; "" while there is none (a stopping agent deletes it)."""
        try:
            return leases.read_namespaced_lease(lease, "kube-node-lease").spec.holder_identity
        except ApiException as exc:
            if exc.status != 404:
                raise
            return ""

    try:
        first = start_agent(nodes[0])
        (published,) = wait_for(
            lambda: agent_slices(api, nodes), 60, lambda: "the slice\n" + first.log_tail()
        )
        assert holder().endswith(f"-{first.process.pid}")
        second = start_agent(nodes[0])
        wait_for(
            lambda: "held by another agent" in second.log.read_text(),
            30,
            lambda: "the second agent to find the pool held\n" + second.log_tail(),
        )
        assert holder().endswith(f"-{first.process.pid}")
        first.stop()
        wait_for(
            lambda: holder().endswith(f"-{second.process.pid}"),
            30,
            lambda: f"the second agent to take the lease (holder {holder()})\n" + second.log_tail(),
        )
        (now,) = agent_slices(api, nodes)
        assert now["spec"]["pool"]["generation"] == published["spec"]["pool"]["generation"]
        assert now["metadata"]["resourceVersion"] == published["metadata"]["resourceVersion"]
    finally:
        delete_fake_nodes(api, nodes)
