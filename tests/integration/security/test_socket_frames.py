"""Issue #28, finding 9 (sockets) through the real ASGI stack, Redis and PostgreSQL: a frame
that fails to parse gets one error answer and a bounded log, never a traceback or a closed
socket (100,000 nested brackets on the agent socket too), and logging out closes the session's
live sockets (4401)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from portal.agents import services
from portal.asgi import application
from tests.helpers.factories import make_world

pytestmark = pytest.mark.django_db(transaction=True)
NODE = "kwok-gpu-0"


def _session(user) -> tuple[Client, list[tuple[bytes, bytes]]]:
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    return client, [(b"origin", b"http://localhost"), (b"host", b"localhost"),
                    (b"cookie", cookie.encode())]  # fmt: skip


def test_a_frame_the_status_socket_cannot_parse_gets_one_error_and_no_traceback(caplog):
    world = make_world()
    _client, headers = _session(world.owner)
    path = f"/ws/projects/{world.project_a.pk}/status/"

    async def scenario() -> list[dict]:
        comm = WebsocketCommunicator(application, path, headers=headers)
        connected, _ = await comm.connect()
        assert connected
        assert json.loads(await comm.receive_from(timeout=5))["type"] == "snapshot"
        replies = []
        for frame in ("not json", "[" * 100_000, '{"type": "x"}'):
            await comm.send_to(text_data=frame)
            replies.append(json.loads(await comm.receive_from(timeout=5)))
        assert await comm.receive_nothing(timeout=0.5)  # one answer each, still open
        await comm.disconnect()
        return replies

    with caplog.at_level(logging.DEBUG):
        replies = asyncio.run(scenario())
    assert all(r["type"] == "error" and "only sends updates" in r["error"] for r in replies)
    assert "Traceback" not in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    lines = [r for r in caplog.records if r.name == "portal.sockets"]
    assert 1 <= len(lines) <= 3, [r.getMessage() for r in lines]


def test_100000_nested_brackets_on_the_agent_socket_are_refused_and_it_keeps_serving(caplog):
    token = services.issue_node_token(NODE)
    headers = [
        (b"origin", b"http://localhost"),
        (b"host", b"localhost"),
        (b"authorization", f"Bearer {token}".encode()),
        (b"x-tranche-node", NODE.encode()),
    ]
    ok = json.dumps({"type": "status", "node": NODE, "seq": 2, "ts": 1.0, "full": True,
                     "dropped": 0, "gpus": [], "pods": [], "removed": []})  # fmt: skip

    async def scenario() -> tuple[dict, dict]:
        comm = WebsocketCommunicator(application, "/ws/agent/", headers=headers)
        connected, _ = await comm.connect()
        assert connected
        await comm.send_to(text_data="[" * 100_000)
        refused = json.loads(await comm.receive_from(timeout=5))
        await comm.send_to(text_data=ok)
        after = json.loads(await comm.receive_from(timeout=5))
        await comm.disconnect()
        return refused, after

    with caplog.at_level(logging.WARNING):
        refused, after = asyncio.run(scenario())
    assert "nested too deeply" in refused["error"]
    assert after == {"ack": 2}
    assert "Traceback" not in caplog.text


def test_logging_out_closes_the_sessions_status_socket_and_no_other():
    world = make_world()
    leaving, headers = _session(world.owner)
    _staying, other_headers = _session(world.owner)  # the same person in another browser
    path = f"/ws/projects/{world.project_a.pk}/status/"

    async def scenario() -> tuple[dict, bool]:
        comm = WebsocketCommunicator(application, path, headers=headers)
        other = WebsocketCommunicator(application, path, headers=other_headers)
        for c in (comm, other):
            connected, _ = await c.connect()
            assert connected
            assert json.loads(await c.receive_from(timeout=5))["type"] == "snapshot"
        response = await sync_to_async(leaving.post)("/logout/")
        assert response.status_code in (200, 302)
        closed = await comm.receive_output(timeout=5)
        still_open = await other.receive_nothing(timeout=1)
        await comm.disconnect()
        await other.disconnect()
        return closed, still_open

    closed, still_open = asyncio.run(scenario())
    assert closed == {"type": "websocket.close", "code": 4401}
    assert still_open, "another session of the same user keeps its socket"
