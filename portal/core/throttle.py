"""Fixed-window counters in Redis, shared by every portal replica: `allow(scope, key, limit,
window)` counts one attempt and says whether it is within `limit` per `window` seconds.

Used where an anonymous caller makes something costly (a sign-up makes a user, an organization
and a namespace). Keys hold a hash of the caller's key, never the address itself. When Redis is
unreachable the attempt is refused: a cap that opens while its store is down is no cap (the
portal's pages answer 503 in that state anyway).
"""

from __future__ import annotations

import hashlib
import math
import time

import redis
from django.conf import settings

from portal.core.redisconn import shared_client


def _redis() -> redis.Redis:
    return shared_client(2)


def _key(scope: str, key: str, window: int) -> str:
    bucket = int(time.time() // window)
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    prefix = settings.CHANNEL_LAYERS["default"]["CONFIG"].get("prefix", "tranche")
    return f"{prefix}:throttle:{scope}:{digest}:{bucket}"


def allow(scope: str, key: str, limit: int, window: int) -> bool:
    """Count one attempt of `key` in `scope`; True while at most `limit` in this window."""
    name = _key(scope, key, window)
    try:
        pipe = _redis().pipeline()
        pipe.incr(name)
        pipe.expire(name, window + 5)
        count, _ = pipe.execute()
    except redis.RedisError:
        return False
    return int(count) <= limit


def seconds_left(window: int, now: float | None = None) -> int:
    """Seconds until this window ends and every count starts again (at least 1): what a
    refused caller is told to wait (Retry-After)."""
    now = time.time() if now is None else now
    return max(1, math.ceil(window - now % window))


def reset(scope: str, key: str, window: int) -> None:
    """Forget the current window's count (tests; staff lifting a cap early)."""
    _redis().delete(_key(scope, key, window))
