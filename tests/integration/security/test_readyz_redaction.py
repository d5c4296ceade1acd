"""Issue #14 item 11: /readyz names an unreachable Redis without any part of its password, even
a password that contains '@'."""

from __future__ import annotations

import socket

import pytest
from django.test import override_settings

pytestmark = pytest.mark.django_db


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends: nothing listens


def test_readyz_hides_a_redis_password_containing_at_signs(client):
    url = f"redis://tranche:s3cr@t-pa55@w0rd@127.0.0.1:{_closed_port()}/0"
    with override_settings(REDIS_URL=url):
        response = client.get("/readyz")
    assert response.status_code == 503
    body = response.content.decode()
    assert "Redis unreachable at redis://***@127.0.0.1:" in body
    for fragment in ("s3cr", "t-pa55", "w0rd", "tranche:"):
        assert fragment not in body, fragment
