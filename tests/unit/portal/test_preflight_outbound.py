"""The outbound rules of pre-flight (#28 finding 5), pure: schemes, addresses, allow-lists."""

from __future__ import annotations

import threading
import time

import pytest

from portal.preflight.outbound import (
    Client,
    DeadlineError,
    OutboundError,
    Policy,
    resolve,
    target_of,
)


def test_plain_http_only_for_listed_hosts() -> None:
    with pytest.raises(OutboundError, match="HTTPS only"):
        target_of("http://registry.example/v2/", Policy())
    listed = Policy(plain_http=frozenset({"registry.example:5000"}))
    assert target_of("http://registry.example:5000/v2/", listed).port == 5000
    with pytest.raises(OutboundError, match="HTTPS only"):
        target_of("http://registry.example:6379/", listed)  # another port of that host
    with pytest.raises(OutboundError, match="not an http"):
        target_of("file:///etc/passwd", Policy())
    with pytest.raises(OutboundError, match="not an http"):
        target_of("https://user:pw@registry.example/", Policy())


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "10.1.2.3", "192.168.0.1", "169.254.169.254", "100.64.0.1", "0.0.0.0",  # noqa: S104
     "::1", "::ffff:127.0.0.1", "fe80::1", "fc00::1"],
)  # fmt: skip
def test_non_public_addresses_are_refused_unless_listed(address: str) -> None:
    url = f"https://[{address}]/" if ":" in address else f"https://{address}/"
    with pytest.raises(OutboundError, match="not a public address"):
        resolve(target_of(url, Policy()), Policy())
    host = address.lower()
    assert resolve(target_of(url, Policy()), Policy(allowed_hosts=frozenset({host})))


def test_the_clusters_ranges_are_refused_even_when_public() -> None:
    policy = Policy(blocked_networks=Policy.networks(["8.8.8.0/24"]))
    with pytest.raises(OutboundError, match="not a public address"):
        resolve(target_of("https://8.8.8.8/", policy), policy)
    assert resolve(target_of("https://8.8.4.4/", policy), policy) == "8.8.4.4"


def test_a_name_lookup_that_never_answers_ends_at_the_deadline() -> None:
    """getaddrinfo cannot be pointed at a loopback DNS server without root (resolv.conf), so
    the silent server is a lookup that blocks until the test ends, as glibc's does while its
    server stays silent; nothing else is replaced."""
    answered = threading.Event()

    def silent_dns(*_args: object, **_kwargs: object) -> list:
        answered.wait(30)
        raise OSError("no answer")

    try:
        policy = Policy(getaddrinfo=silent_dns, timeout_s=10)
        client = Client(policy, time.monotonic() + 1.0, 1.0)
        started = time.monotonic()
        with pytest.raises(DeadlineError, match="longer than 1 s"):
            client.request("GET", "https://registry.example/v2/")
        assert time.monotonic() - started < 1.5
        client.close()

        # the policy's per-step timeout holds too, in words for the tenant
        policy = Policy(getaddrinfo=silent_dns, timeout_s=1)
        client = Client(policy, time.monotonic() + 30, 30)
        started = time.monotonic()
        with pytest.raises(OutboundError, match=r"registry.example could not be looked up within"):
            client.request("GET", "https://registry.example/v2/")
        assert time.monotonic() - started < 1.5
        client.close()
    finally:
        answered.set()
