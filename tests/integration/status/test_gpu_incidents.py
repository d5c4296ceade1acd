"""A failed GPU reaches tenants and support through the real agent ingest (issue #34): the
agent's health findings (built by `nodeagent.health_findings` from a fatal XID on a GPU holding
two tenants' slices, and from an application XID of one process) go over /ws/agent/; each
tenant's open live page is told about its own pod only, within the frame's round trip; the
live page lists the incident when loaded; the support console lists the unhealthy GPU with its
node, model, XID, time and the pods on it, and the alert; a recovery takes it off the list. The
pods are ones the ingest believes the node about (issue #45): bound to it by the cluster, each
holding a claim allocated there."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.urls import reverse

from nodeagent.checkpoint import PreparedClaim, PreparedDevice
from nodeagent.health import HealthEvent
from nodeagent.health_findings import findings_for
from nodeagent.xid import Severity
from portal.agents import services
from portal.agents.models import GpuHealthEvent, NodeToken
from portal.cluster.models import UsageRecord
from tests.helpers.factories import make_staff, make_world
from tests.helpers.observed import bind_pods
from tests.helpers.pages import next_message
from tests.integration.status.test_status_socket import _agent, _publish, _watch

NODE = "kwok-gpu-0"
GPU = "GPU-51a1a7ed-0000-4000-8000-000000000000"
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def world():
    return make_world()


@pytest.fixture
def token(world) -> str:
    return services.issue_node_token(NODE)


def _claim(ns: str, pod: str) -> PreparedClaim:
    """The agent's prepared claim of `pod`; the cluster's facts about it (the pod bound to
    NODE, its claim in the ledger) are stored by `_held_on_node`."""
    dev = PreparedDevice("gpu", NODE, "gpu-0", GPU, "", 8 << 30, 25, "")
    return PreparedClaim(uid=f"c-{pod}", namespace=ns, name=f"{pod}-gpu", devices=(dev,),
                         config_path="", cdi_path="", region_dir="",
                         pods=(f"{ns}/{pod}/uid-{pod}",))  # fmt: skip


def _held_on_node(world, project, pod: str) -> None:
    UsageRecord.objects.create(
        claim_uid=f"c-{pod}", claim_name=f"{pod}-gpu", organization=project.organization,
        project=project, product=next(iter(world.products.values())), node=NODE,
        device="gpu-0", allocated_at=datetime.now(UTC) - timedelta(hours=1), opened_by="event",
    )  # fmt: skip
    bind_pods(project.pk, {pod: {"phase": "Running", "node": NODE, "uid": f"uid-{pod}"}})


def _frame(seq: int, event: HealthEvent, claims: list[PreparedClaim], pod_of_pid=None) -> str:
    findings = [
        {"kind": k, "ts": event.ts, "namespace": ns, "subject": s, "detail": d, **extra}
        for k, ns, s, d, extra in findings_for(event, NODE, claims, pod_of_pid or (lambda p: None))
    ]
    gpus = [{"uuid": GPU, "name": "Tesla V100-PCIE-32GB", "memory_total_bytes": 32 << 30,
             "memory_used_bytes": 0}]  # fmt: skip
    return json.dumps({"type": "status", "node": NODE, "seq": seq, "ts": time.time(),
                       "full": False, "dropped": 0, "gpus": gpus, "pods": [], "removed": [],
                       "findings": findings})  # fmt: skip


def test_both_tenants_are_told_and_support_lists_the_gpu(world, token):
    a, b = world.project_a, world.project_b
    claims = [_claim(a.namespace, "llm-a"), _claim(b.namespace, "llm-b")]
    _held_on_node(world, a, "llm-a")
    _held_on_node(world, b, "llm-b")
    failed = HealthEvent(time.time(), GPU, Severity.FATAL, "GPU has fallen off the bus", 79)

    async def scenario() -> tuple[dict, dict, float]:
        page_a = await _watch(world.owner, a.pk)
        page_b = await _watch(world.outsider, b.pk)
        await next_message(page_a)  # the snapshot
        await next_message(page_b)
        agent = await _agent(token)
        sent = time.monotonic()
        await _publish(agent, _frame(1, failed, claims))
        got_a, got_b = await next_message(page_a), await next_message(page_b)
        took = time.monotonic() - sent
        for c in (agent, page_a, page_b):
            await c.disconnect()
        return got_a, got_b, took

    got_a, got_b, took = asyncio.run(scenario())
    print(f"\nlive pages told {took:.3f} s after the agent's frame")  # noqa: T201
    assert took < 5
    assert (got_a["type"], got_a["pod"]) == ("gpu-event", "llm-a")
    assert (got_b["type"], got_b["pod"]) == ("gpu-event", "llm-b")
    assert "the GPU your pod ran on failed (XID 79" in got_a["text"]
    assert "Kubernetes moves your pod" in got_a["text"]

    client = Client()
    client.force_login(world.owner)
    page = client.get(reverse("project_status", args=[a.pk])).content.decode()
    assert "<code>llm-a</code>: the GPU your pod ran on failed (XID 79" in page
    assert "llm-b" not in page  # the other tenant's pod is not shown

    support = make_staff("sue", "Support")
    client.force_login(support)
    console = client.get(reverse("support_console")).content.decode()
    row = console[console.index(f'<tr data-unhealthy-gpu="{GPU}">') :]
    row = row[: row.index("</tr>")]
    for cell in (NODE, "Tesla V100-PCIE-32GB", GPU, "<td>79</td>", "<td>2</td>",
                 f"{a.namespace}/llm-a", f"{b.namespace}/llm-b"):  # fmt: skip
        assert cell in row, row
    assert "GPU has fallen off the bus" in console  # the alert
    assert NodeToken.objects.get(node_name=NODE).findings  # kept for the alerts list

    recovered = HealthEvent(time.time(), GPU, Severity.FATAL, "GPU answers again (reset)", 79,
                            recovered=True)  # fmt: skip

    async def recover() -> None:
        agent = await _agent(token)
        await _publish(agent, _frame(2, recovered, claims))
        await agent.disconnect()

    asyncio.run(recover())
    console = client.get(reverse("support_console")).content.decode()
    assert f'<tr data-unhealthy-gpu="{GPU}">' not in console
    assert "Every GPU is healthy." in console


def test_an_application_xid_is_told_to_its_pod_only(world, token):
    a, b = world.project_a, world.project_b
    claims = [_claim(a.namespace, "llm-a"), _claim(b.namespace, "llm-b")]
    _held_on_node(world, a, "llm-a")
    _held_on_node(world, b, "llm-b")
    xid = HealthEvent(time.time(), GPU, Severity.APPLICATION, "GPU memory page fault", 31, pid=77)

    async def scenario() -> None:
        agent = await _agent(token)
        await _publish(agent, _frame(1, xid, claims, {77: "uid-llm-b"}.get))
        await agent.disconnect()

    asyncio.run(scenario())
    rows = list(GpuHealthEvent.objects.values_list("kind", "project_id", "pod_name", "xid"))
    assert rows == [("pod-xid", b.pk, "llm-b", 31)]
    client = Client()
    client.force_login(world.owner)
    page = client.get(reverse("project_status", args=[a.pk])).content.decode()
    assert 'id="gpu-incidents" aria-labelledby="gpu-incidents-title" hidden' in page
    support = make_staff("sue", "Support")
    client.force_login(support)
    assert "Every GPU is healthy." in client.get(reverse("support_console")).content.decode()
