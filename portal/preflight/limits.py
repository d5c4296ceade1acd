"""Per-user and per-organisation limits on pre-flight calls: how many at once, how many a minute.

Pre-flight is untrusted work a free sign-up can start (22 calls at a silent registry once held
every database connection of the portal), so each call takes a slot first. A slot is a
member of a Redis sorted set scored by when it expires (a crashed holder frees it by itself);
the rate is a counter per minute window. One Lua script checks and takes both atomically.
A refusal says which limit and in how many seconds to try again.
"""

from __future__ import annotations

import functools
import math
import secrets
import time
from dataclasses import dataclass

import redis
from django.conf import settings

_ACQUIRE = """
local now, expires = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = 1, 2 do redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now) end
for i = 3, 4 do
  local count = tonumber(redis.call('GET', KEYS[i]) or '0')
  if count >= tonumber(ARGV[3 + i]) then
    return {'rate' .. i, tostring(redis.call('PTTL', KEYS[i]) / 1000)}
  end
end
for i = 1, 2 do
  if redis.call('ZCARD', KEYS[i]) >= tonumber(ARGV[3 + i]) then
    local first = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
    return {'busy' .. i, tostring(tonumber(first[2]) - now)}
  end
end
for i = 1, 2 do
  redis.call('ZADD', KEYS[i], expires, ARGV[3])
  redis.call('EXPIREAT', KEYS[i], math.ceil(expires))
end
for i = 3, 4 do
  if redis.call('INCR', KEYS[i]) == 1 then redis.call('EXPIRE', KEYS[i], ARGV[8]) end
end
return {'ok', '0'}
"""
WINDOW_S = 60


@functools.cache
def client() -> redis.Redis:
    """One client per process (redis-py's pool is thread-safe); the web's waits are BLPOPs of
    at most 5 s, so the socket timeout is a little longer."""
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=10, socket_connect_timeout=3)


class BusyError(Exception):
    """A limit was reached; the message is for the tenant, `retry_after` in whole seconds."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Slot:
    """A call's place; released by whoever finishes the call's last part (web or worker)."""

    user_key: str
    org_key: str
    token: str

    def as_list(self) -> list[str]:
        return [self.user_key, self.org_key, self.token]


def _keys(user_id: int, org_id: int) -> list[str]:
    prefix = settings.PREFLIGHT_KEY_PREFIX
    window = int(time.time() // WINDOW_S)
    return [
        f"{prefix}:busy:user:{user_id}",
        f"{prefix}:busy:org:{org_id}",
        f"{prefix}:rate:user:{user_id}:{window}",
        f"{prefix}:rate:org:{org_id}:{window}",
    ]


_WHY = {
    "busy1": "you already have {n} pre-flight checks running",
    "busy2": "your organisation already has {n} pre-flight checks running",
    "rate3": "you ran {n} pre-flight checks in the last minute",
    "rate4": "your organisation ran {n} pre-flight checks in the last minute",
}


def acquire(user_id: int, org_id: int, hold_s: float) -> Slot:
    """Take a slot held at most `hold_s`, or raise BusyError saying when to try again."""
    keys = _keys(user_id, org_id)
    token = secrets.token_hex(8)
    now = time.time()
    limits = [
        settings.PREFLIGHT_USER_CONCURRENCY,
        settings.PREFLIGHT_ORG_CONCURRENCY,
        settings.PREFLIGHT_USER_PER_MINUTE,
        settings.PREFLIGHT_ORG_PER_MINUTE,
    ]
    result, wait = client().eval(
        _ACQUIRE, 4, *keys, f"{now:.3f}", f"{now + hold_s:.3f}", token, *limits, WINDOW_S
    )
    result = result.decode() if isinstance(result, bytes) else str(result)
    if result != "ok":
        seconds = max(1, math.ceil(float(wait)))
        if result.startswith("busy"):
            seconds = min(seconds, math.ceil(settings.PREFLIGHT_CALL_DEADLINE_SECONDS))
        n = limits[int(result[-1]) - 1]
        raise BusyError(
            f"Pre-flight did not run: {_WHY[result].format(n=n)}, the most allowed. "
            f"Try again in {seconds} s.",
            seconds,
        )
    return Slot(keys[0], keys[1], token)


def release(slot: Slot | list[str]) -> None:
    """Free the slot (idempotent); a Redis error leaves it to expire on its own."""
    user_key, org_key, token = slot.as_list() if isinstance(slot, Slot) else slot
    try:
        pipe = client().pipeline()
        pipe.zrem(user_key, token)
        pipe.zrem(org_key, token)
        pipe.execute()
    except redis.RedisError:
        pass
