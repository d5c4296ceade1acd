"""Issue #14 items 6 and 10 through the real ASGI stack: the websocket Origin must match the
portal's own scheme, host and port; an unknown path or an oversized id closes cleanly (4404)."""

from __future__ import annotations

import asyncio

import pytest
from channels.testing import WebsocketCommunicator

from portal.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


async def _handshake(path: str, origin: str, host: str = "localhost:8000") -> tuple[bool, object]:
    headers = [(b"origin", origin.encode()), (b"host", host.encode())]
    comm = WebsocketCommunicator(application, path, headers=headers)
    connected, code = await comm.connect(timeout=5)
    if connected:
        closed = await comm.receive_output(timeout=5)
        code = closed.get("code")
    await comm.disconnect()
    return connected, code


@pytest.mark.parametrize(
    "origin",
    [
        "http://localhost:6666",  # same host, other port
        "https://localhost:8000",  # same host and port, other scheme
        "https://localhost:1",
        "http://127.0.0.1:8000",  # another allowed host is another origin
        "null",
        "http://evil.example:8000",
    ],
)
def test_a_foreign_origin_is_refused_even_on_an_allowed_host(origin):
    connected, _ = asyncio.run(_handshake("/ws/ping/", origin))
    assert connected is False


def test_the_portals_own_origin_is_accepted():
    async def ping() -> bool:
        headers = [(b"origin", b"http://localhost:8000"), (b"host", b"localhost:8000")]
        comm = WebsocketCommunicator(application, "/ws/ping/", headers=headers)
        connected, _ = await comm.connect(timeout=5)
        await comm.disconnect()
        return connected

    assert asyncio.run(ping()) is True


@pytest.mark.parametrize(
    "path",
    ["/ws/nope/", "/ws/projects/1234567890123456789/status/", "/ws/projects/x/status/", "/"],
)
def test_unknown_websocket_paths_close_cleanly_with_4404(path):
    connected, code = asyncio.run(_handshake(path, "http://localhost:8000"))
    assert (connected, code) == (True, 4404)
