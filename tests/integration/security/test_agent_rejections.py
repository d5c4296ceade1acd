"""Issue #14 item 12 (second half): a flood of bad agent messages is answered message by
message, but logged at most a burst of lines (plus one saying the rest are suppressed)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from channels.testing import WebsocketCommunicator

from portal.agents import services
from portal.agents.consumers import HANDSHAKES, REJECTIONS_LOGGED_PER_MINUTE
from portal.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)
FLOOD = 1000


def test_a_flood_of_rejected_messages_is_answered_but_not_logged_line_by_line(caplog):
    token = services.issue_node_token("kwok-flood")
    headers = [
        (b"origin", b"http://localhost"),
        (b"host", b"localhost"),
        (b"authorization", f"Bearer {token}".encode()),
        (b"x-tranche-node", b"kwok-flood"),
    ]

    async def flood() -> list[dict]:
        comm = WebsocketCommunicator(application, "/ws/agent/", headers=headers)
        connected, _ = await comm.connect()
        assert connected
        replies = []
        for i in range(FLOOD):
            await comm.send_to(text_data=f"{{not json {i}")
            replies.append(json.loads(await comm.receive_from(timeout=5)))
        await comm.disconnect()
        return replies

    with caplog.at_level(logging.WARNING, logger="portal.agents"):
        replies = asyncio.run(flood())
    assert len(replies) == FLOOD
    assert all("malformed JSON" in r["error"] for r in replies)
    lines = [r for r in caplog.records if r.name == "portal.agents"]
    assert len(lines) <= REJECTIONS_LOGGED_PER_MINUTE + 1, len(lines)
    assert "suppressed" in lines[-1].getMessage()


def test_a_flood_of_refused_handshakes_is_not_logged_line_by_line(caplog):
    """#45: 23,295 refused handshakes on the ingest port wrote 46,590 lines: the consumer's (here)
    and uvicorn's 403 line (`portal.core.ratelimit.RefusedHandshakes`, tests/unit)."""
    services.issue_node_token("kwok-real")
    HANDSHAKES._windows.clear()  # another test's refusals in this process count otherwise

    async def knock(i: int) -> None:
        headers = [(b"origin", b"http://localhost"), (b"host", b"localhost"),
                   (b"authorization", f"Bearer wrong-{i}".encode()),
                   (b"x-tranche-node", b"kwok-real")]  # fmt: skip
        comm = WebsocketCommunicator(application, "/ws/agent/", headers=headers)
        connected, code = await comm.connect()
        assert (connected, code) == (False, 4401)

    async def flood() -> None:
        for i in range(200):
            await knock(i)

    with caplog.at_level(logging.WARNING, logger="portal.agents"):
        asyncio.run(flood())
    lines = [r.getMessage() for r in caplog.records if r.name == "portal.agents"]
    assert len(lines) == REJECTIONS_LOGGED_PER_MINUTE + 1, len(lines)
    assert "wrong or revoked token for node 'kwok-real'" in lines[0]
    assert "suppressed" in lines[-1]
