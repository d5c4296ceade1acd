"""Django's PostgreSQL backend, with connections taken from the pool through `DatabaseGate`.

Why: under ASGI every sync view of a portal process runs in one thread, so a request that waits
for a connection holds up every request behind it. During an outage each one waited the pool's
full timeout (10 s then), and after it the pool's reconnect back-off (1, 2, 4, 8 s...) outlived
the outage by seconds. The gate:

- waits at most the pool's `timeout` (TRANCHE_DB_POOL_TIMEOUT: ~1 s for the portal, longer for
  workers and the watcher, set per role by whoever starts them);
- once a wait failed while the pool had room to grow (nothing could connect: the database is
  down, not busy), answers at once with the error, except one short probe every PROBE_EVERY
  seconds, which also asks the pool to try a new connection; the first connection given ends it.

With `reconnect_timeout` short (settings) the pool's own back-off gives up within seconds and
the next probe starts a fresh attempt, so a connection is made within about a second of the
database answering again.

A wait that failed with every connection of the pool made and in use is the opposite case: the
database answers, this process is busy. It raises `PoolBusy`, so the outage page says "busy,
try again in a few seconds" rather than blaming the database (50 pre-flight calls at once
were told "Tranche cannot reach the database").
"""

from __future__ import annotations

import threading
import time

import psycopg
from django.db.backends.postgresql import base
from psycopg import IsolationLevel

PROBE_EVERY = 0.25  # seconds between real attempts while the database is known down
PROBE_WAIT = 0.1  # how long such a probe waits for the pool


class PoolBusy(psycopg.OperationalError):
    """Every connection of the pool is made and in use: the database is up, this process is
    busy (portal.core.outage words it so)."""


class DatabaseGate:
    """Process-wide: is PostgreSQL known down, since when, and when to try again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.down_since: float | None = None
        self.last_error = ""
        self._next_probe = 0.0

    def getconn(self, pool):
        """A connection from `pool`, or psycopg.OperationalError within the pool's timeout, at
        once while the database is known down (but for one probe per PROBE_EVERY)."""
        now = time.monotonic()
        with self._lock:
            down, timeout = self.down_since, pool.timeout
            if down is not None:
                if now < self._next_probe and not pool.get_stats().get("pool_available"):
                    raise psycopg.OperationalError(
                        f"PostgreSQL unreachable for {now - down:.1f}s ({self.last_error}); "
                        f"not waiting, retried every {PROBE_EVERY}s"
                    )
                self._next_probe, timeout = now + PROBE_EVERY, PROBE_WAIT
        try:
            conn = pool.getconn(timeout=timeout)
        except psycopg.OperationalError as exc:
            stats = pool.get_stats()
            if stats.get("pool_size", 0) < pool.max_size:  # room to grow, yet nothing came
                with self._lock:
                    if self.down_since is None:
                        self.down_since = time.monotonic()
                    self.last_error = str(exc).strip().splitlines()[0] if str(exc) else "timeout"
                raise
            raise PoolBusy(
                f"all {pool.max_size} database connections of this process in use for "
                f"{timeout:.1f}s"
            ) from exc
        with self._lock:
            self.down_since = None
        return conn


GATE = DatabaseGate()


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params):
        pool = self.pool
        if pool is None or "isolation_level" in self.settings_dict["OPTIONS"]:
            return super().get_new_connection(conn_params)
        # What Django's own does for a pool without an isolation level, through the gate.
        self.isolation_level = IsolationLevel.READ_COMMITTED
        pool.open()
        return GATE.getconn(pool)
