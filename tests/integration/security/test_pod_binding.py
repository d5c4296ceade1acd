"""Issue #14 item 3: a node's report of a pod is accepted only when the cluster bound that pod
to that node (the watcher's spec.nodeName); anything else is refused, logged and not stored."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest
from channels.testing import WebsocketCommunicator

from portal.agents import selectors, services
from portal.asgi import application
from portal.tenants.models import Organization, Project
from tests.helpers.observed import bind_pods

pytestmark = pytest.mark.django_db(transaction=True)
GIB = 1024**3


def _pod(pod: str, uid: str, used_gib: int) -> dict:
    return {
        "namespace": "acme-ml", "pod": pod, "uid": uid, "gpu_uuid": "GPU-1",
        "memory_limit_bytes": 8 * GIB, "memory_used_bytes": used_gib * GIB,
        "rejected_allocations": 0, "compute_target_percent": 25,
        "compute_used_percent": 10.0, "throttled_seconds": 0.0, "processes": 1,
    }  # fmt: skip


def _frame(node: str, seq: int, pod: dict) -> str:
    return json.dumps(
        {"type": "status", "node": node, "seq": seq, "ts": time.time(), "full": True,
         "dropped": 0, "gpus": [], "pods": [pod], "removed": []}
    )  # fmt: skip


async def _report(node: str, token: str, frame: str) -> dict:
    headers = [
        (b"origin", b"http://localhost"),
        (b"host", b"localhost"),
        (b"authorization", f"Bearer {token}".encode()),
        (b"x-tranche-node", node.encode()),
    ]
    comm = WebsocketCommunicator(application, "/ws/agent/", headers=headers)
    connected, _ = await comm.connect()
    assert connected
    await comm.send_to(text_data=frame)
    reply = json.loads(await comm.receive_from(timeout=5))
    await comm.disconnect()
    return reply


def test_only_the_node_a_pod_is_bound_to_can_report_it(caplog):
    org = Organization.objects.create(name="Acme", slug="acme")
    project = Project.objects.create(organization=org, name="ML", slug="ml", namespace="acme-ml")
    a, b = "kwok-gpu-0", "kwok-gpu-1"
    tokens = {n: services.issue_node_token(n) for n in (a, b)}
    bind_pods(
        project.pk, {"train-0": {"phase": "Running", "reason": "", "node": a, "uid": "uid-a"}}
    )
    with caplog.at_level(logging.WARNING, logger="portal.agents"):
        assert asyncio.run(_report(a, tokens[a], _frame(a, 1, _pod("train-0", "uid-a", 2)))) == {
            "ack": 1
        }
        # Node B claims node A's pod under another uid with its own figures: refused.
        takeover = asyncio.run(_report(b, tokens[b], _frame(b, 1, _pod("train-0", "uid-b", 7))))
        # Node A invents a pod in the tenant's namespace that the cluster does not run: refused.
        invented = asyncio.run(_report(a, tokens[a], _frame(a, 2, _pod("ghost", "uid-g", 1))))
    assert "runs on node kwok-gpu-0, not kwok-gpu-1" in takeover["refused"][0]["reason"]
    assert "no such pod scheduled to a node" in invented["refused"][0]["reason"]
    assert "runs on node kwok-gpu-0, not kwok-gpu-1" in caplog.text
    assert "acme-ml/ghost" in caplog.text
    row = selectors.pod_status("acme-ml", "train-0")
    assert (row.node_name, row.pod_uid, row.memory_used_bytes) == (a, "uid-a", 2 * GIB)
    assert selectors.pod_status("acme-ml", "ghost") is None
