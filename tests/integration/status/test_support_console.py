"""The support console: Support staff see the fleet (node → GPU → slices held by
organization/project/pod, free slices per product), alerts and search, each linking to the
project's live page; tenants, Billing staff and staff outside Support get 404."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from portal.agents import services
from portal.agents.models import NodeToken, PodSliceStatus
from portal.cluster.models import PodState
from tests.helpers.factories import make_staff, make_world

pytestmark = pytest.mark.django_db
GIB = 1024**3
NODE = "kwok-gpu-0"


def _get(user, query: str = "") -> tuple[int, str]:
    client = Client()
    client.force_login(user)
    response = client.get(reverse("support_console") + (f"?q={query}" if query else ""))
    return response.status_code, response.content.decode()


@pytest.fixture
def fleet_world():
    world = make_world()
    services.issue_node_token(NODE)
    NodeToken.objects.filter(node_name=NODE).update(
        last_seen_at=timezone.now() - timedelta(minutes=5),
        gpus=[{"uuid": "GPU-a", "name": "Tesla V100-PCIE-32GB",
               "memory_total_bytes": 32 * GIB, "memory_used_bytes": 0}],
    )  # fmt: skip
    PodSliceStatus.objects.create(
        project=world.project_a, node_name=NODE, namespace=world.project_a.namespace,
        pod_name="train-0", pod_uid="u1", gpu_uuid="GPU-a", memory_limit_bytes=8 * GIB,
        memory_used_bytes=GIB, rejected_allocations=0, compute_target_percent=25,
        compute_used_percent=20.0, throttled_seconds=0.0, reported_at=timezone.now(),
    )  # fmt: skip
    state = PodState.objects.create(
        project=world.project_b, namespace=world.project_b.namespace, name="stuck",
        phase="Pending", reason="CapacityBusy", words="Capacity busy: every compatible GPU…",
    )  # fmt: skip
    PodState.objects.filter(pk=state.pk).update(created_at=timezone.now() - timedelta(minutes=11))
    return world


def test_support_sees_fleet_alerts_and_search(fleet_world):
    world = fleet_world
    status, page = _get(make_staff("s-support", "Support"), "other")
    assert status == 200
    assert 'data-gpu="GPU-a"' in page
    assert f"{world.org_a.name} / " in page
    assert f"{world.project_a.namespace}/train-0: 8192 MiB, 25%" in page
    assert "V100 8 GiB slice (25 %): 3" in page  # 32 GiB, 8 held: three more 8 GiB slices fit
    assert "agent late" in page
    assert f"Agent of {NODE} late: last report " in page
    assert f"{world.project_b.namespace}/stuck pending since" in page
    assert reverse("project_status", args=[world.project_b.pk]) in page
    assert 'id="search-results"' in page
    assert world.project_b.namespace in page.split('id="search-results"')[1].split("</ul>")[0]


def test_tenants_billing_and_other_staff_get_404(fleet_world):
    assert _get(fleet_world.owner)[0] == 404
    assert _get(make_staff("plain-staff", None))[0] == 404
    # issue #28: Billing works on billing pages; the console shows every tenant's pods
    assert _get(make_staff("b-billing", "Billing"))[0] == 404


@pytest.mark.django_db(transaction=True)
def test_fleet_socket_refuses_tenants_and_tellsmake_staff():
    import asyncio

    from channels.layers import get_channel_layer
    from channels.testing import WebsocketCommunicator

    from portal.asgi import application
    from portal.core.groups import FLEET_GROUP
    from tests.integration.status.test_status_socket import _session_headers

    world = make_world()
    staff = make_staff("sam", "Support")

    async def open_as(user) -> WebsocketCommunicator:
        from channels.db import database_sync_to_async

        headers = await database_sync_to_async(_session_headers)(user)
        comm = WebsocketCommunicator(application, "/ws/support/fleet/", headers)
        connected, _ = await comm.connect()
        assert connected
        return comm

    async def scenario() -> tuple[dict, dict]:
        tenant = await open_as(world.owner)
        refused = await tenant.receive_output(timeout=5)
        console = await open_as(staff)
        await get_channel_layer().group_send(FLEET_GROUP, {"type": "fleet.changed"})
        told = await console.receive_json_from(timeout=5)
        await console.disconnect()
        return refused, told

    refused, told = asyncio.run(scenario())
    assert refused == {"type": "websocket.close", "code": 4403}
    assert told == {"type": "fleet.changed"}
