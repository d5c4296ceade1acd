"""The websocket ping goes through the real Redis channel layer and back."""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.testing import WebsocketCommunicator

from portal.asgi import application

ORIGIN = [(b"origin", b"http://localhost"), (b"host", b"localhost")]


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
