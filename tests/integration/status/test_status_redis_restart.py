"""Live status through a Redis restart: sockets that stay open get updates again afterwards.

The channel layer (Redis pub/sub) is pointed at a Redis of this test's own, restarted on the same
port while a viewer and an agent stay connected; no reconnect is needed on either side.
"""

from __future__ import annotations

import asyncio

import pytest
from channels.layers import channel_layers

from tests.helpers.own_redis import OwnRedis
from tests.helpers.pages import next_message
from tests.integration.status.test_status_socket import (  # the fixtures too
    _agent,
    _status_frame,
    _watch,
    token,  # noqa: F401
    world,  # noqa: F401
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def own_layer(settings, tmp_path):
    redis = OwnRedis(tmp_path)
    redis.start()
    layer = dict(settings.CHANNEL_LAYERS["default"])
    host = {**layer["CONFIG"]["hosts"][0], "address": f"redis://127.0.0.1:{redis.port}/0"}
    layer["CONFIG"] = {**layer["CONFIG"], "hosts": [host]}
    settings.CHANNEL_LAYERS = {"default": layer}
    channel_layers.backends.clear()
    yield redis
    channel_layers.backends.clear()
    redis.stop()


def test_open_sockets_get_updates_after_redis_restarts(world, token, own_layer) -> None:  # noqa: F811
    ns = world.project_a.namespace

    async def scenario() -> dict:
        page = await _watch(world.member, world.project_a.pk)
        await next_message(page, timeout=5)
        agent = await _agent(token)
        await agent.send_to(text_data=_status_frame(1, ns, "before"))
        assert "ack" in await agent.receive_from(timeout=5)
        assert (await next_message(page, timeout=5))["key"] == f"{ns}/before"

        own_layer.stop()
        own_layer.start()  # same port, empty: subscriptions must be made again
        got_row = asyncio.Event()

        async def keep_reporting() -> int:
            """The agent reports every 0.5 s (it does every few seconds); each is acked."""
            seq = 1
            while not got_row.is_set():
                seq += 1
                await agent.send_to(text_data=_status_frame(seq, ns, "after"))
                reply = await agent.receive_from(timeout=10)
                assert "ack" in reply, reply
                await asyncio.sleep(0.5)
            return seq

        reporter = asyncio.create_task(keep_reporting())
        row = await next_message(page, timeout=20)
        got_row.set()
        await reporter
        await agent.disconnect()
        await page.disconnect()
        return row

    assert asyncio.run(scenario())["key"] == f"{ns}/after"
