"""#45: the agents' ingest port served the whole portal (login, admin, pages); now only the
agents' socket, the probes and /metrics."""

from __future__ import annotations

import asyncio

import pytest
from channels.testing import WebsocketCommunicator

from portal.agents import services
from portal.asgi import build_application

pytestmark = pytest.mark.django_db(transaction=True)


async def _get(app, path: str) -> int:
    scope = {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(),
             "query_string": b"", "headers": [(b"host", b"localhost")], "scheme": "http",
             "server": ("localhost", 8002), "client": ("127.0.0.1", 5555),
             "asgi": {"version": "3.0"}, "http_version": "1.1", "root_path": ""}  # fmt: skip
    sent: list[dict] = []
    events = iter([{"type": "http.request", "body": b"", "more_body": False}])

    async def receive() -> dict:
        for event in events:
            return event
        await asyncio.Event().wait()  # the client stays connected until the answer is sent
        raise AssertionError("unreachable")

    async def send(message: dict) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return next(m["status"] for m in sent if m["type"] == "http.response.start")


async def _socket(app, path: str, token: str) -> bool:
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost"),
               (b"authorization", f"Bearer {token}".encode()),
               (b"x-tranche-node", b"kwok-gpu-0")]  # fmt: skip
    comm = WebsocketCommunicator(app, path, headers=headers)
    connected, _ = await comm.connect()
    if connected:
        await comm.disconnect()
    return connected


def test_the_ingest_port_serves_only_the_agents_and_the_probes() -> None:
    token = services.issue_node_token("kwok-gpu-0")
    ingest, pages = build_application("ingest"), build_application("pages")
    for path in ("/login/", "/admin/login/", "/", "/signup/"):
        assert asyncio.run(_get(ingest, path)) == 404, path
        assert asyncio.run(_get(pages, path)) != 404, path  # the pages' port still serves them
    assert asyncio.run(_get(ingest, "/healthz")) == 200
    assert asyncio.run(_get(ingest, "/readyz")) in (200, 503)  # answered, whatever it says
    assert asyncio.run(_socket(ingest, "/ws/agent/", token))
    assert not asyncio.run(_socket(ingest, "/ws/ping/", token))
    assert asyncio.run(_socket(pages, "/ws/agent/", token))
