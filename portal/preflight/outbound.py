"""Every request pre-flight makes for a tenant (registries, token realms, redirects), guarded.

A tenant names the host (an image reference, or a registry's `WWW-Authenticate` realm), so each
request is treated as the tenant's: HTTPS unless the operator lists the host as plain HTTP; the
name is resolved once and refused if any address is loopback, private, link-local, or in the
cluster's service/pod ranges, unless the operator allow-listed that host; the connection goes to
the address that was checked (no second resolution to rebind); redirects are followed by hand
and checked again, and credentials never follow a redirect to another host.

Time is a wall clock, not a per-read timeout: a watchdog shuts the socket at the deadline, so a
registry sending a byte a second ends at the deadline like a silent one. The name lookup is
under the same clock: `getaddrinfo` cannot be interrupted, so it runs in a thread of its own
and is waited for only until the deadline (a silent DNS server otherwise held a scan for the
resolver's own 10-30 s); at most MAX_LOOKUPS lookups run at once per process. Bytes are counted by
the callers (`registry.py`, `layers.py`), which read bodies in bounded steps.

Errors (`OutboundError`) are written for the tenant: unreachable, TLS, refused address,
timeout with the real time; never an internal address, an exception text or a port state.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection

MAX_REDIRECTS = 5
MAX_LOOKUPS = 32
_LOOKUPS = threading.BoundedSemaphore(MAX_LOOKUPS)
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class OutboundError(Exception):
    """A request pre-flight refused or could not complete; the message is for the tenant."""


class DeadlineError(OutboundError):
    """The wall-clock deadline passed."""


@dataclass(frozen=True)
class Policy:
    """The operator's outbound rules (settings `PREFLIGHT_*`, docs/preflight.md)."""

    plain_http: frozenset[str] = frozenset()  # host or host:port spoken to over HTTP
    allowed_hosts: frozenset[str] = frozenset()  # host or host:port that may be non-public
    realm_hosts: frozenset[str] = frozenset()  # token services besides the registry's own host
    blocked_networks: tuple[IPNetwork, ...] = ()  # the cluster's service and pod ranges
    timeout_s: float = 10.0  # connect, and the longest wait for any one read
    getaddrinfo: Callable[..., list] = socket.getaddrinfo  # the name lookup (tests: a silent one)

    @staticmethod
    def networks(cidrs: list[str]) -> tuple[IPNetwork, ...]:
        return tuple(ipaddress.ip_network(c.strip(), strict=False) for c in cidrs if c.strip())


def _listed(hostport: str, host: str, names: frozenset[str]) -> bool:
    return hostport in names or host in names


@dataclass
class Target:
    scheme: str
    host: str
    port: int
    path: str

    @property
    def hostport(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def netloc(self) -> str:
        default = 443 if self.scheme == "https" else 80
        return self.host if self.port == default else self.hostport


def target_of(url: str, policy: Policy) -> Target:
    """Scheme, host, port and path of `url`, refused unless the scheme suits the host."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise OutboundError("The registry named an address that is not a URL.") from None
    if not host or parts.scheme not in ("http", "https") or parts.username:
        raise OutboundError("The registry named an address that is not an http(s) URL.")
    if parts.scheme == "http" and not _listed(f"{host}:{port}", host, policy.plain_http):
        raise OutboundError(
            f"{host} would be spoken to over plain HTTP; pre-flight uses HTTPS only, unless your "
            "platform team lists the registry as plain HTTP."
        )
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, host, port, path)


def _refused(address: ipaddress.IPv4Address | ipaddress.IPv6Address, policy: Policy) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    if not address.is_global or address.is_multicast:
        return True  # loopback, private, link-local, shared, reserved, unspecified
    return any(address in net for net in policy.blocked_networks)


def _lookup(target: Target, policy: Policy, seconds: float) -> list:
    """getaddrinfo's answer, waited for at most `seconds` (else OutboundError); the lookup's
    thread ends when the resolver gives up, and holds one of MAX_LOOKUPS meanwhile."""
    started = time.monotonic()
    slow = f"the name {target.host} could not be looked up within {max(seconds, 0):.0f} s (DNS)"
    if not _LOOKUPS.acquire(timeout=max(0.0, seconds)):
        raise OutboundError(slow)
    answer: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            answer["infos"] = policy.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            answer["error"] = exc
        finally:
            _LOOKUPS.release()
            done.set()

    threading.Thread(target=run, name=f"lookup {target.host}", daemon=True).start()
    if not done.wait(max(0.0, seconds - (time.monotonic() - started))):
        raise OutboundError(slow)
    if "error" in answer:
        raise OutboundError(f"The registry host {target.host} does not exist (DNS).")
    return answer["infos"]


def resolve(target: Target, policy: Policy, seconds: float | None = None) -> str:
    """The one address connected to; refused if any address of the name is not public. The
    lookup is waited for at most `seconds` (the policy's timeout if not given)."""
    infos = _lookup(target, policy, policy.timeout_s if seconds is None else seconds)
    addresses = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
    if not _listed(target.hostport, target.host, policy.allowed_hosts) and any(
        _refused(a, policy) for a in addresses
    ):
        raise OutboundError(
            f"{target.host} is not a public address; pre-flight reads only public registries "
            "(and those your platform team allows)."
        )
    return str(addresses[0])


def _kill(sock: socket.socket) -> None:
    # the plain socket's shutdown: it wakes a reader blocked in another thread, and works while
    # a response still holds the socket its connection let go of (`Connection: close`)
    with contextlib.suppress(OSError, ValueError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


@dataclass
class Client:
    """One scan's outbound requests, all ending by `deadline` (a time.monotonic() value)."""

    policy: Policy
    deadline: float
    deadline_s: float
    conns: list[HTTPConnection] = field(default_factory=list)
    # Every socket a request opened, kept apart from its connection: a response with
    # `Connection: close` takes the socket (conn.sock becomes None) and reads on from it.
    socks: list[socket.socket] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.expired = threading.Event()
        self.lock = threading.Lock()
        self.timer = threading.Timer(max(0.0, self.deadline - time.monotonic()), self._expire)
        self.timer.daemon = True
        self.timer.start()

    def _expire(self) -> None:
        self.expired.set()
        with self.lock:
            for sock in self.socks:
                _kill(sock)

    def close(self) -> None:
        self.timer.cancel()
        with self.lock:
            for conn in self.conns:
                conn.close()
            self.conns.clear()
            self.socks.clear()

    def check_deadline(self) -> None:
        if self.expired.is_set() or time.monotonic() >= self.deadline:
            raise DeadlineError(f"took longer than {self.deadline_s:.0f} s")

    def _connect(self, target: Target) -> HTTPConnection:
        try:
            left = self.deadline - time.monotonic()
            address = resolve(target, self.policy, min(self.policy.timeout_s, left))
        except OutboundError:
            self.check_deadline()  # the image's deadline, if that is what ended the lookup
            raise
        timeout = max(0.1, min(self.policy.timeout_s, self.deadline - time.monotonic()))
        if target.scheme == "https":
            conn: HTTPConnection = HTTPSConnection(
                address, target.port, timeout=timeout, server_hostname=target.host,
                assert_hostname=target.host, cert_reqs="CERT_REQUIRED",
            )  # fmt: skip
        else:
            conn = HTTPConnection(address, target.port, timeout=timeout)
        with self.lock:
            self.conns.append(conn)
        return conn

    def _watch(self, sock: socket.socket | None) -> None:
        """Let the watchdog shut `sock` at the deadline (at once if it has passed)."""
        if sock is None:
            return
        with self.lock:
            self.socks.append(sock)
        if self.expired.is_set():
            _kill(sock)

    def _once(self, method: str, target: Target, headers: dict[str, str]) -> Any:
        self.check_deadline()
        conn = self._connect(target)
        try:
            conn.connect()
            self._watch(conn.sock)
            conn.request(
                method, target.path, headers={"Host": target.netloc, **headers},
                preload_content=False,
            )  # fmt: skip
            return conn.getresponse()
        except (TimeoutError, urllib3.exceptions.TimeoutError):
            self.check_deadline()
            raise OutboundError(
                f"{target.host} did not answer within {self.policy.timeout_s:.0f} s"
            ) from None
        except (ssl.SSLError, urllib3.exceptions.SSLError, ssl.CertificateError):
            self.check_deadline()
            raise OutboundError(
                f"{target.host} did not offer a valid TLS certificate for its name"
            ) from None
        except (OSError, urllib3.exceptions.HTTPError, http.client.HTTPException, ValueError):
            self.check_deadline()
            raise OutboundError(f"{target.host} cannot be reached") from None

    def request(
        self,
        method: str,
        url: str,
        headers: dict[str, str] | None = None,
        fields: dict[str, str] | None = None,
        credentials_host: str = "",
    ) -> tuple[Any, str]:
        """The response (body unread) and the URL that gave it, redirects followed by hand.
        `Authorization` is sent only while the host is `credentials_host` (or the first)."""
        if fields:
            url += ("&" if "?" in url else "?") + urlencode(fields)
        headers = dict(headers or {})
        first = None
        for _ in range(MAX_REDIRECTS + 1):
            target = target_of(url, self.policy)
            first = first or credentials_host or target.host
            sent = headers if target.host == first else {
                k: v for k, v in headers.items() if k.lower() != "authorization"
            }  # fmt: skip
            resp = self._once(method, target, sent)
            if resp.status not in (301, 302, 303, 307, 308):
                return resp, url
            location = resp.headers.get("Location", "")
            resp.release_conn()
            if not location:
                raise OutboundError(f"{target.host} redirected without saying where")
            url = urljoin(url, location)
        raise OutboundError(f"the registry redirected more than {MAX_REDIRECTS} times")

    def read(self, resp: Any, limit: int, what: str) -> bytes:
        """The whole body, at most `limit` bytes (else OutboundError), before the deadline."""
        chunks, size = [], 0
        try:
            while True:
                self.check_deadline()
                chunk = resp.read(min(65536, limit + 1 - size))
                if not chunk:
                    break
                size += len(chunk)
                chunks.append(chunk)
                if size > limit:
                    raise OutboundError(f"{what} is larger than {limit // 1024} KiB")
        except (OSError, urllib3.exceptions.HTTPError, http.client.HTTPException) as exc:
            self.check_deadline()
            raise OutboundError(f"{what} was cut off") from exc
        self.check_deadline()
        return b"".join(chunks)
