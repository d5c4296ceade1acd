"""The full simulated path through the real API server, for one pod.

A pod requesting an 8 GiB slice (the documented claim template) is allocated by the real
scheduler on a kwok node whose agent runs in simulation mode. The agent's kubelet-lite calls the
agent's own DRA plugin over gRPC with the real allocated ResourceClaim, runs the pod's workload
(annotations: try 10 GiB) as a local process with the CDI edits applied on simgpu, under the
real interception core. The workload sees CUDA_ERROR_OUT_OF_MEMORY; the portal (daphne, Redis,
the test PostgreSQL database) stores the 8 GiB limit, the used memory and the rejection within
3 s of it. Deleting the pod stops the workload and unprepares the claim.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from django.db import connection
from kubernetes import client

from controller.watch import Watcher
from deploy.devcluster.nodes import delete_fake_nodes
from nodeagent import cdi
from portal.agents import selectors
from tests.cluster.nodeagent.conftest import (
    agent_slices,
    claim_of_pod,
    create_pod,
    create_template,
    describe_pod,
    sim_project_on_a_node,
)
from tests.helpers.portal import serve_portal
from tests.helpers.skips import needs_native_sim
from tests.helpers.wait import wait_for

GIB = 1024**3
pytestmark = [
    pytest.mark.django_db(transaction=True),
    needs_native_sim,
]


def _events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_pod_over_its_slice_is_refused_and_the_portal_shows_it(
    kube_cluster, start_agent, products, namespace, tmp_path
):
    began = time.monotonic()
    api = kube_cluster.api_client
    core = client.CoreV1Api(api)
    project, node, token_file = sim_project_on_a_node(api, namespace, tmp_path, "tr-sim")
    # the watcher tells the portal which node each pod is bound to; the portal accepts a pod's
    # report only from that node (issue #14), so the path runs with it as in production
    watcher = Watcher(api, flush_interval=0.3)
    try:
        with serve_portal(connection.settings_dict["NAME"]) as portal:
            agent = start_agent(node, "--portal", portal.url, "--token-file", str(token_file))

            def context() -> str:
                return f"{describe_pod(api, namespace, 'llm')}\n{agent.log_tail()}\n" + (
                    f"--- portal log ---\n{portal.log_tail()}"
                )

            wait_for(lambda: agent_slices(api, [node]), 60, lambda: "the slice\n" + context())
            product = products(8192, 25)
            create_template(api, namespace, product)
            watcher.start()
            create_pod(
                api, namespace, "llm", product, nodes=[node],
                annotations={"tranche.dev/workload-memory-gib": "10",
                             "tranche.dev/workload-duty": "0.05"},
            )  # fmt: skip
            uid = core.read_namespaced_pod("llm", namespace).metadata.uid
            workload_log = agent.home / "pods" / f"{namespace}_llm_{uid}.log"

            def oom() -> dict | None:
                found = [e for e in _events(workload_log) if e.get("event") == "alloc"]
                refused = [e for e in found if e["result"] == "CUDA_ERROR_OUT_OF_MEMORY"]
                return refused[0] if refused else None

            refusal = wait_for(oom, 60, lambda: "the core to refuse an allocation\n" + context())
            allocs = [e for e in _events(workload_log) if e.get("event") == "alloc"]
            granted = sum(e["bytes"] for e in allocs if e["result"] == "CUDA_SUCCESS")
            assert granted < 8 * GIB <= granted + refusal["bytes"], allocs

            claim = claim_of_pod(api, namespace, "llm")
            claim_uid = claim["metadata"]["uid"]
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            assert result["pool"] == node
            assert result["consumedCapacity"] == {"memory": "8Gi", "cores": "25"}
            spec_file = cdi.spec_path(agent.home / "cdi", claim_uid)
            config_file = agent.home / "claims" / claim_uid / "slice.conf"
            assert spec_file.exists()
            assert oct(config_file.stat().st_mode & 0o777) == "0o444"
            assert "device.0.memory_bytes = 8589934592" in config_file.read_text()

            def stored():
                row = selectors.pod_status(namespace, "llm")
                return row if row and row.rejected_allocations >= 1 else None

            row = wait_for(stored, 10, lambda: "the portal's pod status\n" + context())
            latency = time.time() - refusal["t"]
            assert latency < 3, f"rejection reached the portal after {latency:.2f}s"
            assert row.project_id == project.id
            assert row.node_name == node
            assert row.pod_uid == uid
            assert row.memory_limit_bytes == 8 * GIB
            assert granted <= row.memory_used_bytes <= 8 * GIB
            assert row.rejected_allocations == 1
            assert row.compute_target_percent == 25

            started = rf"started workload of pod {namespace}/llm \(pid (\d+)\)"
            match = re.search(started, agent.log.read_text())
            assert match, agent.log_tail()
            pid = int(match.group(1))
            assert _alive(pid)
            core.delete_namespaced_pod("llm", namespace, grace_period_seconds=0)
            wait_for(
                lambda: not _alive(pid) and not spec_file.exists() and not config_file.exists(),
                30,
                lambda: "the workload to stop and the claim to be unprepared\n" + context(),
            )
            wait_for(
                lambda: selectors.pod_status(namespace, "llm") is None,
                10,
                lambda: "the portal to drop the pod's status\n" + context(),
            )
    finally:
        watcher.close()
        delete_fake_nodes(api, [node])
    print(  # noqa: T201
        f"rejection -> portal state {latency:.2f}s; test body {time.monotonic() - began:.1f}s"
    )
