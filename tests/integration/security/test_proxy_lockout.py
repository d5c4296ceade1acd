"""Issue #31 (proxy): the login lock-out and the sign-up throttle count the client's address as
exactly TRANCHE_TRUSTED_PROXY_HOPS proxies reported it (the right-most X-Forwarded-For entry
they did not write), and a username is also locked from all addresses together. The same
settings behind the installed chart: tests/install/test_proxy.py."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client, RequestFactory

from portal.core.client_address import client_address
from tests.helpers.factories import PASSWORD

pytestmark = pytest.mark.django_db
WRONG = "wrong-guess-123"
ATTACKER, VICTIM = "198.51.100.7", "203.0.113.20"


def _login(username: str, password: str, forwarded: str):
    """A POST as the one trusted proxy passes it on: the client's header plus its address."""
    return Client(HTTP_X_FORWARDED_FOR=forwarded).post(
        "/login/", {"username": username, "password": password}
    )


@pytest.fixture
def one_proxy(settings):
    settings.TRANCHE_TRUSTED_PROXY_HOPS = 1
    return settings


@pytest.mark.parametrize(
    ("hops", "header", "expected"),
    [
        (0, "10.9.9.9", "127.0.0.1"),  # nothing trusted: the header is never read
        (1, "10.9.9.9", "10.9.9.9"),
        (1, "6.6.6.6, 10.9.9.9", "10.9.9.9"),  # the client's own entries are left of ours
        (2, "6.6.6.6, 10.9.9.9, 10.0.0.2", "10.9.9.9"),
        (2, "10.9.9.9", "127.0.0.1"),  # fewer entries than proxies: it bypassed one; the peer
        (1, "6.6.6.6, not-an-address", "127.0.0.1"),
        (1, "", "127.0.0.1"),
    ],
)
def test_the_client_is_the_rightmost_untrusted_entry(settings, hops, header, expected):
    settings.TRANCHE_TRUSTED_PROXY_HOPS = hops
    request = RequestFactory().get("/", HTTP_X_FORWARDED_FOR=header, REMOTE_ADDR="127.0.0.1")
    assert client_address(request) == expected


def test_rotating_forwarded_for_does_not_escape_the_lockout(one_proxy, world):
    for n in range(settings.AXES_FAILURE_LIMIT):
        assert _login(world.owner.username, WRONG, f"10.1.{n}.{n}, {ATTACKER}").status_code in (
            200,
            429,
        )
    locked = _login(world.owner.username, PASSWORD, f"10.1.99.99, {ATTACKER}")
    assert locked.status_code == 429, "a new spoofed entry escaped the lock-out"
    assert "logging in is paused" in locked.content.decode()
    # when to retry, for a client as for a person: the cool-off in the header and in words
    minutes = round(float(settings.AXES_COOLOFF_TIME) * 60)
    assert locked["Retry-After"] == str(minutes * 60)
    assert f"Wait {minutes} minutes" in locked.content.decode()


def test_a_spoofed_address_does_not_lock_the_real_user_out(one_proxy, world):
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _login(world.owner.username, WRONG, f"{VICTIM}, {ATTACKER}")
    assert _login(world.owner.username, PASSWORD, f"{VICTIM}, {ATTACKER}").status_code == 429
    # The owner, really at VICTIM, is not locked by failures that only named that address.
    assert _login(world.owner.username, PASSWORD, VICTIM).status_code == 302


def test_a_username_is_locked_from_all_addresses_together(one_proxy, world):
    limit = settings.TRANCHE_LOGIN_USERNAME_FAILURE_LIMIT
    assert limit > settings.AXES_FAILURE_LIMIT
    # Many real addresses, each under the pair's limit: only the username's total stops them.
    for n in range(limit - 1):
        assert _login(world.owner.username, WRONG, f"192.0.2.{n + 1}").status_code == 200
    assert _login(world.owner.username, WRONG, "192.0.2.200").status_code == 429  # the limit-th
    locked = _login(world.owner.username, PASSWORD, "192.0.2.250")  # a fresh address, right pw
    assert locked.status_code == 429
    assert f"{limit} from all addresses together" in locked.content.decode()
    # Another account is not locked by it.
    assert _login(world.member.username, PASSWORD, "192.0.2.250").status_code == 302


def test_signup_throttle_counts_the_forwarded_client(one_proxy):
    from portal.core import throttle
    from portal.tenants.views import SIGNUP_WINDOW_SECONDS, _signup_refusal

    one_proxy.SIGNUP_PER_ADDRESS_PER_HOUR, one_proxy.SIGNUP_PER_HOUR = 2, 100
    scopes = [("signup-address", "198.51.100.8"), ("signup-address", "198.51.100.9")]
    scopes.append(("signup-all", ""))
    for scope, key in scopes:
        throttle.reset(scope, key, SIGNUP_WINDOW_SECONDS)
    try:
        for n in range(2):  # the client's own entries change; the proxy's stays
            ask = RequestFactory().post("/", HTTP_X_FORWARDED_FOR=f"6.6.6.{n}, 198.51.100.8")
            assert _signup_refusal(ask) is None
        third = RequestFactory().post("/", HTTP_X_FORWARDED_FOR="7.7.7.7, 198.51.100.8")
        assert "network address" in (_signup_refusal(third) or ("", 0))[0]
        other = RequestFactory().post("/", HTTP_X_FORWARDED_FOR="198.51.100.9")
        assert _signup_refusal(other) is None
    finally:
        for scope, key in scopes:
            throttle.reset(scope, key, SIGNUP_WINDOW_SECONDS)
