"""A bench's own databases and Redis index, so a bench run beside a running stack (`make run`,
another person's bench) leaves that stack's data alone.

- Databases: `unique_name(prefix)` names a database no one else has (prefix, process id and a
  random tag); `BenchDatabases.create(name)` refuses a name that already exists, and
  `drop_all()` drops only the databases this object created, never a fixed name `WITH (FORCE)`.
- Redis: `bench_redis_url(index)` is the configured Redis URL with the bench's own database
  index (`TRANCHE_BENCH_REDIS_DB`, default 13; a running stack uses 0). `claim_redis(url)`
  refuses to start when that index already holds keys (a stack's live keys, or a crashed run's:
  flush it yourself if it is yours), and `release_redis(url)` empties it at the end, since
  everything in it was written by the bench.
"""

from __future__ import annotations

import os
import secrets
from urllib.parse import urlsplit, urlunsplit

import psycopg
import redis

DEFAULT_REDIS_INDEX = 13


class BenchRefused(SystemExit):
    """The bench would touch data it did not create; nothing was changed."""


def unique_name(prefix: str) -> str:
    """A database name for this run only: `<prefix>_<pid>_<6 hex>` (PostgreSQL's 63-byte limit)."""
    return f"{prefix}_{os.getpid()}_{secrets.token_hex(3)}"[:63]


def _admin(conf: dict) -> psycopg.Connection:
    return psycopg.connect(
        dbname="postgres", user=conf["USER"], password=conf["PASSWORD"], host=conf["HOST"],
        port=conf["PORT"], autocommit=True,
    )  # fmt: skip


class BenchDatabases:
    """The databases one bench run created, on the server `conf` (a Django DATABASES entry)."""

    def __init__(self, conf: dict) -> None:
        self.conf = conf
        self.created: list[str] = []

    def create(self, name: str) -> str:
        with _admin(self.conf) as admin:
            exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
            if exists.fetchone():
                raise BenchRefused(f"database {name!r} exists: not this run's, left untouched")
            admin.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        return name

    def drop_all(self) -> None:
        """Drops what `create` made (its sessions are the bench's own portals and clients)."""
        with _admin(self.conf) as admin:
            while self.created:
                admin.execute(f'DROP DATABASE IF EXISTS "{self.created.pop()}" WITH (FORCE)')


def bench_redis_url(base_url: str, index: int | None = None) -> str:
    """`base_url` with the bench's Redis database index instead of the stack's."""
    if index is None:
        index = int(os.environ.get("TRANCHE_BENCH_REDIS_DB", DEFAULT_REDIS_INDEX))
    parts = urlsplit(base_url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{index}", parts.query, parts.fragment))


def claim_redis(url: str) -> None:
    """Refuses a Redis index that holds keys: they are someone else's."""
    keys = redis.Redis.from_url(url, socket_connect_timeout=2).dbsize()
    if keys:
        index = urlsplit(url).path.lstrip("/") or "0"
        raise BenchRefused(
            f"Redis database {index} holds {keys} keys: a running stack's or an earlier run's. "
            "The bench writes only to an empty index; set TRANCHE_BENCH_REDIS_DB to a free one."
        )


def release_redis(url: str) -> None:
    """Empties the bench's index (claimed empty: every key in it is the bench's)."""
    redis.Redis.from_url(url, socket_connect_timeout=2).flushdb()
