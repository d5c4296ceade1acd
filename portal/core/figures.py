"""Per-project figures the pages read, computed once and kept until a writer changes them.

The quota page read a project's subscriptions with their open orders, its slice usage and its
CPU/RAM waits on every view (issue #35: 50 viewers of one project repeated the same four
queries 50 times a second). `cached(project, name, compute)` keeps what `compute()` returns
in Redis, shared by every portal process; `changed(project_id)` is the one call a writer makes
when it changed a project's figures (order placed or moved, subscription conditions, slice
usage, CPU/RAM use, pod states). The call site is a single line, so it moves with its write.

Never stale: a value is stored under the project's *generation*, which `changed` increments at
once (a reader in the writer's own transaction recomputes) and again after the writer's
transaction commits (`transaction.on_commit`). A reader that computed from rows older than the
commit stores under an older generation, which no later reader asks for; a reader that read the
final generation computes from committed rows. The key also names the project's creation
instant, so a project id that a recreated database hands out again (tests, a restored backup)
never meets the figures of the project that had it before. Values expire after
`TTL_SECONDS` anyway, and with Redis unreachable every view computes (nothing cached, nothing
served stale). Values are pickled Python objects: only the portal writes this Redis.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol, TypeVar

import redis
from django.conf import settings
from django.db import transaction

from portal.core import redisconn


class Project(Protocol):
    """What the key needs of a `tenants.Project` (core sits below tenants: no import)."""

    pk: int
    created_at: datetime


T = TypeVar("T")
TTL_SECONDS = 300
REDIS_TIMEOUT = 0.5
log = logging.getLogger(__name__)


def _prefix() -> str:
    return f"{settings.CHANNEL_LAYERS['default']['CONFIG']['prefix']}:figures"


def _generation_key(project_id: int) -> str:
    return f"{_prefix()}:gen:{project_id}"


def cached(project: Project, name: str, compute: Callable[[], T]) -> T:
    """`compute()`'s value for this project's current generation (see the module docstring)."""
    return cached_many(project, {name: lambda _values: compute()})[name]


def cached_many(
    project: Project, computes: dict[str, Callable[[dict[str, Any]], Any]]
) -> dict[str, Any]:
    """Several figures of one project read in two Redis round trips (its generation, then every
    value), for a page that shows them together. A missing one is `compute(values)`, given the
    values named before it (a figure may derive from an earlier one), and stored."""
    client = redisconn.shared_client(REDIS_TIMEOUT)
    born = int(project.created_at.timestamp() * 1_000_000)
    values: dict[str, Any] = {}
    try:
        generation = int(client.get(_generation_key(project.pk)) or 0)
        keys = [f"{_prefix()}:{project.pk}:{born}:{generation}:{name}" for name in computes]
        blobs = client.mget(keys)
    except redis.RedisError:
        for name, compute in computes.items():
            values[name] = compute(values)
        return values
    missing: dict[str, bytes] = {}
    for (name, compute), key, blob in zip(computes.items(), keys, blobs, strict=True):
        if blob is not None:
            values[name] = pickle.loads(blob)  # noqa: S301 (written by the portal only, below)
            continue
        values[name] = compute(values)
        missing[key] = pickle.dumps(values[name])
    if missing:
        with contextlib.suppress(redis.RedisError):  # not kept: the next view computes again
            pipe = client.pipeline(transaction=False)
            for key, blob in missing.items():
                pipe.set(key, blob, ex=TTL_SECONDS)
            pipe.execute()
    return values


def _bump(project_id: int) -> None:
    try:
        redisconn.shared_client(REDIS_TIMEOUT).incr(_generation_key(project_id))
    except redis.RedisError as exc:  # cached values then live out their TTL
        log.warning("project %s: figures not invalidated (Redis: %s)", project_id, exc)


def changed(project_id: int) -> None:
    """The project's figures changed in the current transaction: readers recompute now and
    again once it commits."""
    _bump(project_id)
    transaction.on_commit(lambda: _bump(project_id))
