"""The websocket ping goes through the real Redis channel layer and back, for logged-in sessions
only (issue #28: anonymous sockets echoed through Redis without limit)."""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from portal.asgi import application

ANONYMOUS = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
ORIGIN: list[tuple[bytes, bytes]] = []  # the logged-in session's headers (fixture `session`)


@pytest.fixture(autouse=True)
def session(transactional_db):
    """Every socket of these tests but the anonymous ones is opened by a logged-in session."""
    user = get_user_model().objects.create_user("pinger", "p@example.test", "x")
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    ORIGIN[:] = [*ANONYMOUS, (b"cookie", cookie.encode())]
    yield client
    ORIGIN.clear()


async def _roundtrip(message: str) -> dict:
    comm = WebsocketCommunicator(application, "/ws/ping/", headers=ORIGIN)
    connected, _ = await comm.connect()
    assert connected
    await comm.send_to(text_data=message)
    reply = json.loads(await comm.receive_from(timeout=5))
    await comm.disconnect()
    return reply


def _run(coro):
    return asyncio.run(coro)


@pytest.mark.django_db(transaction=True)
def test_ping_comes_back_through_the_channel_layer():
    assert _run(_roundtrip(json.dumps({"ping": "abc123"}))) == {
        "pong": "abc123",
        "via": "channel-layer",
    }


@pytest.mark.django_db(transaction=True)
def test_malformed_ping_gets_a_clear_error():
    reply = _run(_roundtrip("not json"))
    assert "expected a JSON object" in reply["error"]


@pytest.mark.django_db(transaction=True)
def test_anonymous_sockets_are_closed_without_an_echo():
    async def attempt() -> tuple[object, object]:
        comm = WebsocketCommunicator(application, "/ws/ping/", headers=ANONYMOUS)
        connected, _ = await comm.connect()
        closed = await comm.receive_output(timeout=5)
        await comm.disconnect()
        return connected, closed

    connected, closed = _run(attempt())
    assert connected is True
    assert closed == {"type": "websocket.close", "code": 4401}


@pytest.mark.django_db(transaction=True)
def test_pings_beyond_the_rate_get_an_error_not_an_echo():
    async def burst() -> list[dict]:
        comm = WebsocketCommunicator(application, "/ws/ping/", headers=ORIGIN)
        connected, _ = await comm.connect()
        assert connected
        for i in range(8):
            await comm.send_to(text_data=json.dumps({"ping": f"p{i}"}))
        replies = [json.loads(await comm.receive_from(timeout=5)) for _ in range(8)]
        await comm.disconnect()
        return replies

    replies = _run(burst())
    assert sum("pong" in r for r in replies) == 5
    assert sum("at most 5 pings a second" in r.get("error", "") for r in replies) == 3


@pytest.mark.django_db(transaction=True)
def test_logging_out_closes_the_sessions_socket(session):
    async def ping_then_logout() -> dict:
        comm = WebsocketCommunicator(application, "/ws/ping/", headers=ORIGIN)
        connected, _ = await comm.connect()
        assert connected
        await comm.send_to(text_data=json.dumps({"ping": "before"}))
        assert "pong" in json.loads(await comm.receive_from(timeout=5))
        from asgiref.sync import sync_to_async

        response = await sync_to_async(session.post)("/logout/")
        assert response.status_code in (200, 302)
        closed = await comm.receive_output(timeout=5)
        await comm.disconnect()
        return closed

    assert _run(ping_then_logout()) == {"type": "websocket.close", "code": 4401}


@pytest.mark.django_db(transaction=True)
def test_foreign_origin_is_refused():
    async def attempt() -> bool:
        comm = WebsocketCommunicator(
            application,
            "/ws/ping/",
            headers=[(b"origin", b"http://evil.example"), (b"host", b"localhost")],
        )
        connected, _ = await comm.connect()
        await comm.disconnect()
        return connected

    assert _run(attempt()) is False


@pytest.mark.django_db(transaction=True)
def test_idle_socket_survives_the_layers_blocking_receive():
    """A socket idle for longer than the layer's 5 s blocking read must still answer: with the
    client library's default 5 s read timeout, every idle consumer died with a 1011 error."""

    async def idle_then_ping() -> dict:
        comm = WebsocketCommunicator(application, "/ws/ping/", headers=ORIGIN)
        connected, _ = await comm.connect()
        assert connected
        assert await comm.receive_nothing(timeout=7.0)  # the idle period under test
        await comm.send_to(text_data=json.dumps({"ping": "still-here"}))
        reply = json.loads(await comm.receive_from(timeout=5))
        await comm.disconnect()
        return reply

    assert _run(idle_then_ping()) == {"pong": "still-here", "via": "channel-layer"}
