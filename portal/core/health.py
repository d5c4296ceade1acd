"""Readiness probes: can this process reach what it needs? Each returns (ok, message)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import psycopg
import redis
from django.conf import settings
from django.db import connection
from django.db.utils import DatabaseError

from portal.core import heartbeats

PROBE_WAIT_SECONDS = 2.0


def check_database() -> tuple[bool, str]:
    """SELECT 1 on a connection of this process's pool, waiting at most PROBE_WAIT_SECONDS for
    one (a request waits up to the pool's timeout; a probe must answer before its own)."""
    try:
        pool = connection.pool
        if pool is None:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
        else:
            pool.open()
            conn = pool.getconn(timeout=PROBE_WAIT_SECONDS)
            try:
                conn.execute("SELECT 1")
            finally:
                pool.putconn(conn)
    except (DatabaseError, psycopg.Error) as exc:
        connection.close()
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return False, f"PostgreSQL unreachable: {first_line}"
    return True, "PostgreSQL ok"


def check_processes() -> tuple[bool, str]:
    """Heartbeats of worker, beat and watcher (and silent node agents, informational)."""
    try:
        return heartbeats.check_processes()
    except DatabaseError as exc:
        connection.close()
        return False, f"heartbeats unreadable: {exc}"


def check_redis() -> tuple[bool, str]:
    client = redis.Redis.from_url(
        settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2, retry_on_timeout=False
    )
    try:
        client.ping()
    except redis.RedisError as exc:
        return False, f"Redis unreachable at {_redacted(settings.REDIS_URL)}: {exc}"
    finally:
        client.close()
    return True, "Redis ok"


def _redacted(url: str) -> str:
    """Drop credentials from a URL before it goes into a response or a log. The host starts
    after the LAST '@' of the authority (a password may itself contain '@')."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))
