"""Support marks a GPU out for maintenance or back in service from the support console
(issue #34): only support staff and superusers may (everyone else gets 404, nothing marked),
every mark is an AuditLog row, the console lists the GPU out for maintenance, and a GPU
marked back in service is repeated in the portal's answers to its node's agent
(`StatusAck.in_service`) until the agent reports it recovered. The cluster side (the
DeviceTaintRule, the agent's taint removed, a claim landing there again) is
tests/cluster/nodeagent/test_gpu_service.py."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from django.test import Client
from django.urls import reverse

from nodeagent.health import HealthEvent
from nodeagent.xid import Severity
from portal.agents import services
from portal.agents.models import GpuServiceMark
from portal.audit.models import AuditLog
from tests.helpers.factories import make_staff, make_world
from tests.integration.status.test_gpu_incidents import GPU, NODE, _claim, _frame
from tests.integration.status.test_status_socket import _agent

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def world():
    return make_world()


@pytest.fixture
def token(world) -> str:
    token = services.issue_node_token(NODE)

    async def hello() -> None:  # the agent reports its GPUs: the portal knows GPU on NODE
        agent = await _agent(token)
        ev = HealthEvent(time.time(), GPU, Severity.UNKNOWN, "hello", 999)
        await agent.send_to(text_data=_frame(1, ev, []))
        await agent.receive_from(timeout=5)
        await agent.disconnect()

    asyncio.run(hello())
    return token


def _post(user, action: str, gpu: str = GPU, client: Client | None = None):
    if client is None:
        client = Client()
        client.force_login(user)
    return client.post(reverse("support_gpu_service"), {"node": NODE, "gpu": gpu,
                                                         "action": action})  # fmt: skip


def test_only_support_staff_may_mark_a_gpu(world, token):
    billing = make_staff("bill", "Billing")
    plain_staff = make_staff("pat")
    for user in (world.owner, world.member, world.outsider, world.viewer, billing, plain_staff):
        assert _post(user, "maintenance").status_code == 404, user
    assert not GpuServiceMark.objects.exists()
    assert not AuditLog.objects.filter(action__startswith="gpu.").exists()
    form = {"node": NODE, "gpu": GPU, "action": "maintenance"}
    anonymous = Client().post(reverse("support_gpu_service"), form)
    assert anonymous.status_code == 302
    assert "/login" in anonymous["Location"]
    assert not GpuServiceMark.objects.exists()


def test_maintenance_then_in_service_are_audited_and_shown(world, token):
    sue = make_staff("sue", "Support")
    console = Client()
    console.force_login(sue)
    response = _post(sue, "maintenance", client=console)
    assert response.status_code == 302
    page = console.get(reverse("support_console")).content.decode()
    assert "is out for maintenance: no new slice is placed on it" in page
    row = page[page.index(f'<tr data-maintenance-gpu="{GPU}">') :]
    row = row[: row.index("</tr>")]
    assert NODE in row
    assert "sue" in row
    audit = AuditLog.objects.get(action="gpu.maintenance")
    assert (audit.actor, audit.before, audit.after) == (
        sue,
        {"action": "in-service"},
        {"action": "maintenance", "node": NODE, "gpu": GPU},
    )

    assert _post(sue, "in-service", client=console).status_code == 302
    page = console.get(reverse("support_console")).content.decode()
    assert "No GPU is out for maintenance." in page
    audit = AuditLog.objects.get(action="gpu.in_service")
    assert (audit.before, audit.actor) == ({"action": "maintenance"}, sue)
    assert list(GpuServiceMark.objects.values_list("action", flat=True)) == [
        "in-service", "maintenance"]  # fmt: skip


def test_bad_marks_are_refused_and_mark_nothing(world, token):
    sue = make_staff("sue", "Support")
    assert _post(sue, "reboot").status_code == 400
    page = Client()
    page.force_login(sue)
    response = _post(sue, "maintenance", gpu="GPU-not-on-this-node", client=page)
    assert response.status_code == 302
    text = page.get(reverse("support_console")).content.decode()
    assert "has not reported a GPU GPU-not-on-this-node" in text
    assert not GpuServiceMark.objects.exists()
    assert not AuditLog.objects.filter(action__startswith="gpu.").exists()


def test_the_agent_is_told_until_it_reports_the_gpu_recovered(world, token):
    claims = [_claim(world.project_a.namespace, "llm-a")]
    failed = HealthEvent(time.time(), GPU, Severity.FATAL, "double-bit ECC error", 48)
    sue = make_staff("sue", "Support")

    async def send(seq: int, event: HealthEvent) -> dict:
        agent = await _agent(token)
        await agent.send_to(text_data=_frame(seq, event, claims))
        answer = json.loads(await agent.receive_from(timeout=5))
        await agent.disconnect()
        return answer

    assert "in_service" not in asyncio.run(send(2, failed))
    before = time.time()
    _post(sue, "in-service")
    answer = asyncio.run(send(3, failed))
    (mark,) = answer["in_service"]
    assert mark["gpu"] == GPU
    assert before - 1 <= mark["at"] <= time.time()
    recovered = HealthEvent(time.time(), GPU, Severity.FATAL, "marked back in service by support",
                            48, recovered=True)  # fmt: skip
    answer = asyncio.run(send(4, recovered))
    assert "in_service" not in answer  # settled by the frame's own recovery
    assert GpuServiceMark.objects.get().settled_at is not None
