"""Integration fixtures: the two-organization world and a recorder for reconcile messages."""

from __future__ import annotations

import pytest
from channels.layers import channel_layers

from tests.helpers.factories import World, make_world


@pytest.fixture(autouse=True)
def sent_reconciles(monkeypatch) -> list[int]:
    """Record `controller.reconcile_project` sends instead of talking to the broker."""
    sent: list[int] = []
    monkeypatch.setattr("portal.core.queue.send_reconcile", sent.append)
    return sent


@pytest.fixture(autouse=True)
def fresh_channel_layer():
    """Give each test its own channel layer instance.

    Each websocket test drives its scenario with its own `asyncio.run`, but Channels caches one
    layer per process. Under load an `asyncio.Lock` inside that layer gets contended, which binds
    it to that test's event loop; the next test's loop then fails with "bound to a different event
    loop". A layer per test keeps every lock on the loop that uses it.
    """
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


@pytest.fixture
def world(db) -> World:
    return make_world()


@pytest.fixture
def client_of(client):
    """`client_of(user)` → the test client logged in as `user`."""

    def login(user):
        client.force_login(user)
        return client

    return login
