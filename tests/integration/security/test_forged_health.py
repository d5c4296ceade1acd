"""Issue #45 finding 2: a node's GPU health report is believed only about the node's own GPUs and
the pods the cluster bound to it holding claims there, at a time near the portal's clock.

End to end through the real ingest (/ws/agent/ with the node's token): the forged frame of the
finding (8 pods that never existed, an unknown GPU, a time backdated a month) is refused,
counted and alerted; no health event, no outage, and the month's invoice stays 170.00 EUR to the
cent. A genuine report in the same shape is still stored."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from channels.testing import WebsocketCommunicator

from portal.agents import services
from portal.agents.models import GpuHealthEvent, NodeToken
from portal.asgi import application
from portal.billing import services as billing
from portal.billing.models import ProductSla, SlaCreditTier
from portal.cluster.models import SliceOutage, UsageRecord
from portal.core.request_metrics import families
from portal.status.fleet import alerts
from tests.helpers.observed import bind_pods
from tests.integration.billing.helpers import place_at

pytestmark = pytest.mark.django_db(transaction=True)
CLASS = "tranche-v100-16g"  # 170.00 EUR a slice-month
NODE = "kwok-gpu-0"
GPU = "GPU-51a1a7ed-0000-4000-8000-000000000000"
UNKNOWN_GPU = "GPU-deadbeef-0000-4000-8000-000000000000"


def _gpu(uuid: str) -> dict:
    return {"uuid": uuid, "name": "Tesla V100-SXM2-16GB", "memory_total_bytes": 16 << 30,
            "memory_used_bytes": 0}  # fmt: skip


def _finding(kind: str, ns: str, subject: str, ts: float, gpu: str) -> dict:
    return {"kind": kind, "ts": ts, "namespace": ns, "subject": subject, "gpu": gpu, "xid": 79,
            "detail": "the GPU your pod ran on failed (XID 79)"}  # fmt: skip


def _frame(seq: int, findings: list[dict]) -> str:
    return json.dumps(
        {"type": "status", "node": NODE, "seq": seq, "ts": time.time(), "full": True,
         "dropped": 0, "gpus": [_gpu(GPU)], "pods": [], "removed": [], "findings": findings}
    )  # fmt: skip


async def _send(token: str, frame: str) -> dict:
    headers = [
        (b"origin", b"http://localhost"),
        (b"host", b"localhost"),
        (b"authorization", f"Bearer {token}".encode()),
        (b"x-tranche-node", NODE.encode()),
    ]
    comm = WebsocketCommunicator(application, "/ws/agent/", headers=headers)
    connected, _ = await comm.connect()
    assert connected
    await comm.send_to(text_data=frame)
    reply = json.loads(await comm.receive_from(timeout=5))
    await comm.disconnect()
    return reply


def _slice_held_since(world, product, start: datetime) -> None:
    """Project A's one slice: bought, its claim allocated on NODE, its pod bound there."""
    a = world.project_a
    place_at(world.membership(world.owner), a, product, 1, start)
    UsageRecord.objects.create(
        claim_uid="uid-claim", claim_name=f"llm-a-{CLASS}-x7k2p", organization=a.organization,
        project=a, product=product, node=NODE, device="gpu-0",
        allocated_at=start + timedelta(minutes=5), released_at=None, opened_by="event",
    )  # fmt: skip
    bind_pods(a.pk, {"llm-a": {"phase": "Running", "node": NODE, "uid": "uid-llm-a"}})
    sla = ProductSla.objects.create(product=product, target_percent=Decimal("99.5"))
    SlaCreditTier.objects.create(sla=sla, below_percent="95", credit_percent="50")


def _refused_count(cause: str) -> float:
    return families()["health_refused"].labels(cause)._value.get()


def test_forged_health_frame_is_refused_and_bills_nothing(world) -> None:
    product = world.products[CLASS]
    now = datetime.now(UTC)
    first_of_month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    last_month = (first_of_month - timedelta(days=1)).replace(day=1)
    _slice_held_since(world, product, last_month - timedelta(days=10))
    token = services.issue_node_token(NODE)
    ns = world.project_a.namespace
    backdated = (now - timedelta(days=31)).timestamp()
    forged = [_finding("gpu-failed", "-", UNKNOWN_GPU, backdated, UNKNOWN_GPU)] + [
        _finding("pod-gpu-failed", ns, f"ghost-{i}", backdated, UNKNOWN_GPU) for i in range(8)
    ]
    before = _refused_count("time")

    reply = asyncio.run(_send(token, _frame(1, forged)))

    assert reply == {"ack": 1}  # the frame is answered; its forged findings are not stored
    invoice, _ = billing.generate_invoice(world.org_a, last_month.year, last_month.month)
    assert [line.amount for line in invoice.lines.filter(kind="sla")] == []
    assert invoice.net_total == Decimal("170.00")  # the month's one slice, to the cent
    assert not SliceOutage.objects.exists()
    assert not GpuHealthEvent.objects.exists()
    assert _refused_count("time") - before == 9
    token_row = NodeToken.objects.get(node_name=NODE)
    assert token_row.findings == []  # not even as a support finding
    assert len(token_row.refused_health) == 9
    words = [a.text for a in alerts() if a.kind == "health-refused"]
    assert len(words) == 9
    assert any(f"{ns}/ghost-3" in w and "outside the window" in w for w in words)


def test_each_check_refuses_alone_and_a_true_report_is_stored(world) -> None:
    product = world.products[CLASS]
    now = datetime.now(UTC)
    _slice_held_since(world, product, now - timedelta(days=40))
    b = world.project_b
    bind_pods(b.pk, {"llm-b": {"phase": "Running", "node": "kwok-gpu-1", "uid": "uid-llm-b"}})
    token = services.issue_node_token(NODE)
    ns, ts = world.project_a.namespace, now.timestamp()
    frame = [
        _finding("pod-gpu-failed", ns, "llm-a", ts, UNKNOWN_GPU),  # not this node's GPU
        _finding("pod-gpu-failed", ns, "ghost", ts, GPU),  # no such pod on this node
        _finding("pod-gpu-failed", b.namespace, "llm-b", ts, GPU),  # another node's pod
        _finding("pod-gpu-failed", ns, "llm-a", ts + 3600, GPU),  # from the future
        _finding("gpu-failed", "-", GPU, ts, GPU),  # true
        _finding("pod-gpu-failed", ns, "llm-a", ts, GPU),  # true
    ]
    causes = {c: _refused_count(c) for c in ("gpu", "pod", "time")}

    reply = asyncio.run(_send(token, _frame(1, frame)))

    assert reply == {"ack": 1}
    assert {c: _refused_count(c) - n for c, n in causes.items()} == {"gpu": 1, "pod": 2, "time": 1}
    stored = list(GpuHealthEvent.objects.values_list("kind", "namespace", "pod_name", "gpu_uuid"))
    assert sorted(stored) == [("gpu-failed", "", "", GPU), ("pod-gpu-failed", ns, "llm-a", GPU)]
    reasons = [r["reason"] for r in NodeToken.objects.get(node_name=NODE).refused_health]
    assert "the cluster bound no such pod to kwok-gpu-0 (it runs on kwok-gpu-1)" in reasons[2]
    assert SliceOutage.objects.count() == 1  # the true failure opens the slice's outage at ingest


def test_a_pod_without_a_claim_on_the_node_is_refused(world) -> None:
    world_ns = world.project_a.namespace
    bind_pods(world.project_a.pk, {"cpu-job": {"phase": "Running", "node": NODE, "uid": "u"}})
    token = services.issue_node_token(NODE)
    finding = _finding("pod-gpu-failed", world_ns, "cpu-job", time.time(), GPU)
    before = _refused_count("claim")
    assert asyncio.run(_send(token, _frame(1, [finding]))) == {"ack": 1}
    assert _refused_count("claim") - before == 1
    assert not GpuHealthEvent.objects.exists()
