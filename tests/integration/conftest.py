"""Integration fixtures: the two-organization world and a recorder for reconcile messages."""

from __future__ import annotations

import pytest

from tests.factories import World, make_world


@pytest.fixture(autouse=True)
def sent_reconciles(monkeypatch) -> list[int]:
    """Record `controller.reconcile_project` sends instead of talking to the broker."""
    sent: list[int] = []
    monkeypatch.setattr("portal.orders.queue.send_reconcile", sent.append)
    return sent


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
