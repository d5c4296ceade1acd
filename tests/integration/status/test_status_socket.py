"""The live status socket through the real ASGI stack (origin check, session auth), the Redis
channel layer and PostgreSQL. Updates are published the way production publishes them: a node
agent sends a status frame to /ws/agent/, whose consumer stores it and publishes to
`project.<id>`."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from portal.agents import services
from portal.asgi import application
from portal.tenants.models import Membership
from tests.helpers.factories import make_world
from tests.helpers.observed import bind_pods
from tests.helpers.pages import next_message

MIB = 1024 * 1024
NODE = "kwok-gpu-0"
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def world(transactional_db):
    return make_world()


@pytest.fixture
def token(world) -> str:
    # Play the watcher: the cluster bound these pods of project A to this node.
    running = {"phase": "Running", "reason": "", "node": NODE}
    bind_pods(world.project_a.pk, dict.fromkeys(("train-0", "before", "after"), running))
    return services.issue_node_token(NODE)


def _session_headers(user) -> list[tuple[bytes, bytes]]:
    client = Client()
    client.force_login(user)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    return [
        (b"origin", b"http://localhost"),
        (b"host", b"localhost"),
        (b"cookie", f"{settings.SESSION_COOKIE_NAME}={session}".encode()),
    ]


def _status_frame(seq: int, namespace: str, pod: str, removed: bool = False) -> str:
    pods = [] if removed else [
        {
            "namespace": namespace, "pod": pod, "uid": f"uid-{pod}", "gpu_uuid": "GPU-1",
            "memory_limit_bytes": 8192 * MIB, "memory_used_bytes": 2048 * MIB,
            "rejected_allocations": 1, "compute_target_percent": 50,
            "compute_used_percent": 49.0, "throttled_seconds": 0.25, "processes": 1,
        }
    ]  # fmt: skip
    gone = [{"namespace": namespace, "pod": pod}] if removed else []
    return json.dumps(
        {"type": "status", "node": NODE, "seq": seq, "ts": time.time(), "full": False,
         "dropped": 0, "gpus": [], "pods": pods, "removed": gone}
    )  # fmt: skip


async def _agent(token: str) -> WebsocketCommunicator:
    headers = [
        (b"origin", b"http://localhost"),
        (b"host", b"localhost"),
        (b"authorization", f"Bearer {token}".encode()),
        (b"x-tranche-node", NODE.encode()),
    ]
    comm = WebsocketCommunicator(application, "/ws/agent/", headers=headers)
    connected, _ = await comm.connect()
    assert connected
    return comm


async def _publish(agent: WebsocketCommunicator, frame: str) -> None:
    await agent.send_to(text_data=frame)
    assert "ack" in json.loads(await agent.receive_from(timeout=5))


async def _watch(user, project_id: int) -> WebsocketCommunicator:
    headers = await database_sync_to_async(_session_headers)(user)
    comm = WebsocketCommunicator(application, f"/ws/projects/{project_id}/status/", headers)
    connected, _ = await comm.connect()
    assert connected
    return comm


def test_member_receives_rows_published_by_the_agent(world, token):
    ns = world.project_a.namespace

    async def scenario() -> list[dict]:
        page = await _watch(world.member, world.project_a.pk)
        agent = await _agent(token)
        got = [await next_message(page, timeout=5)]
        await _publish(agent, _status_frame(1, ns, "train-0"))
        got.append(await next_message(page, timeout=5))
        await _publish(agent, _status_frame(2, ns, "train-0", removed=True))
        got.append(await next_message(page, timeout=5))
        await page.disconnect()
        await agent.disconnect()
        return got

    snapshot, row, removal = asyncio.run(scenario())
    assert snapshot == {"type": "snapshot", "rows": []}
    assert row["type"] == "row"
    assert row["key"] == f"{ns}/train-0"
    assert row["cells"]["memory"] == "2048 / 8192 MiB (25%)"
    assert row["cells"]["node"] == NODE
    assert removal == {"type": "remove", "key": f"{ns}/train-0"}


def test_a_delivery_costs_no_trip_to_the_sync_thread(world, token, monkeypatch):
    """Channels' dispatch awaits `aclose_old_connections` (a hop to the thread that serves every
    page view) before each message; the agent and live sockets skip it (portal.core.sockets): an
    agent frame reaches three viewers with no such hop (issue #18: 2,000 hops/s at 200 viewers)."""
    import channels.consumer

    hops: list[int] = []
    original = channels.consumer.aclose_old_connections

    async def counted() -> None:
        hops.append(1)
        await original()

    monkeypatch.setattr(channels.consumer, "aclose_old_connections", counted)
    ns = world.project_a.namespace

    async def scenario() -> list[dict]:
        pages = [await _watch(world.member, world.project_a.pk) for _ in range(3)]
        for page in pages:
            await next_message(page, timeout=5)  # the snapshot
        agent = await _agent(token)
        await _publish(agent, _status_frame(1, ns, "train-0"))
        rows = [await next_message(page, timeout=5) for page in pages]
        for comm in (*pages, agent):
            await comm.disconnect()
        return rows

    rows = asyncio.run(scenario())
    assert [r["key"] for r in rows] == [f"{ns}/train-0"] * 3
    assert hops == []


def test_outsider_is_refused_with_4403(world):
    async def scenario() -> dict:
        page = await _watch(world.outsider, world.project_a.pk)
        return await page.receive_output(timeout=5)

    assert asyncio.run(scenario()) == {"type": "websocket.close", "code": 4403}


def test_anonymous_is_refused_with_4403(world):
    async def scenario() -> dict:
        headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
        comm = WebsocketCommunicator(
            application, f"/ws/projects/{world.project_a.pk}/status/", headers
        )
        await comm.connect()
        return await comm.receive_output(timeout=5)

    assert asyncio.run(scenario()) == {"type": "websocket.close", "code": 4403}


def test_removed_member_is_disconnected_on_the_next_event(world, token):
    ns = world.project_a.namespace

    async def scenario() -> tuple[dict, dict]:
        page = await _watch(world.member, world.project_a.pk)
        snapshot = await next_message(page, timeout=5)
        agent = await _agent(token)
        await database_sync_to_async(
            Membership.objects.filter(user=world.member, organization=world.org_a).delete
        )()
        await _publish(agent, _status_frame(1, ns, "train-0"))
        closed = await page.receive_output(timeout=5)
        await agent.disconnect()
        return snapshot, closed

    snapshot, closed = asyncio.run(scenario())
    assert snapshot == {"type": "snapshot", "rows": []}
    assert closed == {"type": "websocket.close", "code": 4403}


def test_deactivated_viewer_is_closed_without_waiting_for_an_update(world):
    """Access is re-checked when the account changes, not on the next agent report."""

    async def scenario() -> tuple[dict, dict]:
        page = await _watch(world.member, world.project_a.pk)
        snapshot = await next_message(page, timeout=5)
        user = world.member
        user.is_active = False
        await database_sync_to_async(user.save)()
        closed = await page.receive_output(timeout=5)
        return snapshot, closed

    snapshot, closed = asyncio.run(scenario())
    assert snapshot == {"type": "snapshot", "rows": []}
    assert closed == {"type": "websocket.close", "code": 4403}


def test_a_role_change_keeps_a_member_watching(world, token):
    ns = world.project_a.namespace

    async def scenario() -> dict:
        page = await _watch(world.member, world.project_a.pk)
        await next_message(page, timeout=5)
        await database_sync_to_async(
            Membership.objects.filter(user=world.member, organization=world.org_a).update
        )(role=Membership.Role.VIEWER)
        membership = await database_sync_to_async(Membership.objects.get)(
            user=world.member, organization=world.org_a
        )
        await database_sync_to_async(membership.save)()  # the role change, through save()
        agent = await _agent(token)
        await _publish(agent, _status_frame(1, ns, "train-0"))
        row = await next_message(page, timeout=5)
        await agent.disconnect()
        await page.disconnect()
        return row

    assert asyncio.run(scenario())["key"] == f"{ns}/train-0"


def test_many_sockets_closing_at_once_leave_no_group_member(world):
    """150 sockets close together: every group_discard succeeds and the project's group ends
    empty. (b6aafaa's list-based layer needed a pooled Redis connection per discard and failed
    past 100 with MaxConnectionsError; the pub/sub layer discards in memory.)"""
    from channels.layers import get_channel_layer

    from portal.core.groups import project_group

    count = 150

    async def scenario() -> tuple[int, bool]:
        layer = get_channel_layer()
        pages = [await _watch(world.member, world.project_a.pk) for _ in range(count)]
        for page in pages:
            await next_message(page, timeout=10)
        group = layer._get_group_channel_name(project_group(world.project_a.pk))
        joined = len(layer.groups.get(group, ()))
        await asyncio.gather(*(page.disconnect() for page in pages))
        return joined, group in layer.groups

    joined, still_there = asyncio.run(scenario())
    assert joined == count
    assert not still_there
