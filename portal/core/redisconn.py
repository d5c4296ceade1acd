"""The portal's one Redis client per process and socket timeout (redis-py's pool is
thread-safe), for the small keys kept beside the channel layer: pod bindings, throttles.

Readiness makes its own fresh connection on purpose (portal/core/health.py), and pre-flight's
limits keep their own for blocking waits (portal/preflight/limits.py).
"""

from __future__ import annotations

import functools

import redis
from django.conf import settings


@functools.cache
def shared_client(socket_timeout: float) -> redis.Redis:
    """The process's client whose commands give up after `socket_timeout` seconds."""
    return redis.Redis.from_url(
        settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=socket_timeout
    )
