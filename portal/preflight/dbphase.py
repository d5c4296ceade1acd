"""How many pre-flight calls of one portal process use the database at once.

Why: 50 calls arriving together (bench/preflight_abuse.py) each took a pooled connection for their
reads (token, project, products, the tenant's identity) and, on two loaded cores, held it for over a
second: the pool (20) ran dry, so other tenants' pages waited and 10-13 of the calls were answered
503. Calls now queue here, holding no connection, and at most PREFLIGHT_DB_CONCURRENCY of them
(default 4) are in their database phase; the rest of the pool stays for pages. The phase ends at
`leave()` (the service calls it before it waits on the network) or when the request ends."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings

_local = threading.local()  # a sync view runs in one thread from start to end
_lock = threading.Lock()
_slots: dict[int, threading.BoundedSemaphore] = {}


def _semaphore() -> threading.BoundedSemaphore:
    size = settings.PREFLIGHT_DB_CONCURRENCY
    with _lock:
        if size not in _slots:  # keyed by size: a test's settings override gets its own
            _slots[size] = threading.BoundedSemaphore(size)
        return _slots[size]


@contextmanager
def database_phase(wait_s: float) -> Iterator[bool]:
    """True once this call may use the database; False when no place freed within `wait_s`."""
    slots = _semaphore()
    got = slots.acquire(timeout=max(0.0, wait_s))
    _local.held = slots if got else None
    try:
        yield got
    finally:
        leave()


def leave() -> None:
    """This call's database phase is over (idempotent; nothing when none was entered)."""
    slots, _local.held = getattr(_local, "held", None), None
    if slots is not None:
        slots.release()
