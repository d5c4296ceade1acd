"""An order placed while the provisioning queue (Redis) is unreachable says so, truthfully."""

from __future__ import annotations

import socket

import pytest
from django.urls import reverse

from portal.celery import app
from portal.core import queue
from portal.orders.models import Order
from tests.integration.portal.confirming import confirmed_order

SEND_RECONCILE = queue.send_reconcile  # the real one; integration tests record sends instead

pytestmark = pytest.mark.django_db(transaction=True)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens once the socket is closed


@pytest.fixture
def broker_down(monkeypatch):
    """The real send path, to a broker address where nothing listens."""
    monkeypatch.setattr("portal.core.queue.send_reconcile", SEND_RECONCILE)
    monkeypatch.setattr(app.conf, "broker_url", f"redis://127.0.0.1:{_closed_port()}/0")
    monkeypatch.setattr(app, "_pool", None)
    monkeypatch.setattr(app.amqp, "_producer_pool", None)
    yield
    app._pool = app.amqp._producer_pool = None  # the next user builds them from the real URL


def _place(client, world, key: str):
    client.force_login(world.owner)
    url = reverse("order_confirm", args=[world.project_a.pk])
    data = confirmed_order(client, world.project_a, world.products["tranche-v100-8g"], 1, key=key)
    return client.post(url, data, follow=True)


def test_order_with_the_queue_down_says_it_waits_for_the_queue(world, client, broker_down):
    page = _place(client, world, "queue-down").content.decode()
    order = Order.objects.get(idempotency_key="queue-down")
    assert order.state == Order.State.PENDING  # stored: the resync provisions it later
    assert "provisioning queue is unreachable" in page
    assert "will be provisioned when the queue is back" in page
    assert "provisioning starts now" not in page
