"""Behind the chart: the installed portal (portal.proxy.trustedHops: 1, no `daphne
--proxy-headers`) counts a login failure against the address its one proxy appended to
X-Forwarded-For, not against any entry the client wrote. Here the test plays that proxy: each
request carries what a client might send followed by the client's real address.

- rotating the client-written entries does not escape the lock-out;
- failures that name a real user's address (a spoofed entry) do not lock that user out.

The same settings outside the chart: tests/integration/security/test_proxy_lockout.py.
"""

from __future__ import annotations

import time

import pytest

from tests.install.installation import Installation
from tests.install.tenant import PASSWORD, Tenant

FAILURES = 5  # the chart's default TRANCHE_LOGIN_FAILURE_LIMIT
ATTACKER, OTHER_ATTACKER, VICTIM = "198.51.100.7", "198.51.100.8", "203.0.113.20"


@pytest.fixture(scope="module")
def victim(installation: Installation) -> str:
    """A tenant who signed up from VICTIM; their username."""
    username = f"proxy{int(time.time()) % 100000}"
    Tenant(installation.url, forwarded_for=VICTIM).sign_up(username, "Proxy Labs", "web")
    return username


def _attack(installation: Installation, username: str, spoofed: str, real: str) -> list[int]:
    """FAILURES wrong passwords from `real`, the client's own entries `spoofed` (n: attempt)."""
    statuses = []
    for n in range(FAILURES):
        entries = spoofed.format(n=n)
        attacker = Tenant(installation.url, forwarded_for=f"{entries}, {real}")
        statuses.append(attacker.log_in(username, "wrong-guess-123").status)
    return statuses


def test_rotating_forwarded_for_does_not_escape_the_lockout(installation, victim) -> None:
    statuses = _attack(installation, victim, "10.1.{n}.{n}", ATTACKER)
    assert statuses[: FAILURES - 1] == [200] * (FAILURES - 1), statuses
    # Right password, yet another made-up entry: still the attacker's address, still locked.
    again = Tenant(installation.url, forwarded_for=f"10.1.99.99, {ATTACKER}").log_in(
        victim, PASSWORD
    )
    assert again.status == 429, (again.status, again.url, again.body[:800])
    assert "logging in is paused" in again.body


def test_a_spoofed_address_does_not_lock_the_real_user_out(installation, victim) -> None:
    statuses = _attack(installation, victim, VICTIM, OTHER_ATTACKER)
    assert statuses[-1] == 429, statuses  # the attacker is locked out (its own address) ...
    real = Tenant(installation.url, forwarded_for=VICTIM).log_in(victim, PASSWORD)
    # ... the tenant really at VICTIM logs in: a session, away from the log-in page.
    assert real.status == 200, (real.status, real.body[:800])
    assert "/login/" not in real.url, (real.url, real.body[:800])
