"""Readiness checks: can this process reach what it needs? Each returns (ok, message), and every
one is bounded so that /readyz answers within a probe's timeout (it answered "ready"
after 9.2 s with PostgreSQL's postmaster frozen, as `SELECT 1` had no deadline).

The network checks (a new PostgreSQL connection and `SELECT 1`, a Redis PING, and any extra
check a scope adds) run side by side in a small thread pool and are given `CHECK_DEADLINE`
seconds together; one that has not answered by then is reported as not answering, and while it
still hangs, the next probe reports it at once instead of starting another. The heartbeat
check reads rows, so it runs in the request's own thread (its transaction, its connection),
only once PostgreSQL answered, under a statement timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from urllib.parse import urlsplit, urlunsplit

import psycopg
import redis
from django.conf import settings
from django.db import connection, transaction
from django.db.utils import DatabaseError

from portal.core import cluster, heartbeats

CHECK_DEADLINE = 0.8  # seconds for the network checks together: a probe's timeout is 1 s
STATEMENT_TIMEOUT_MS = 300  # for the heartbeat rows, read once PostgreSQL answered
Check = Callable[[], tuple[bool, str]]
LABELS = {"database": "PostgreSQL unreachable", "redis": "Redis unreachable",
          "cluster": "the API server is not answering"}  # fmt: skip

_pool = ThreadPoolExecutor(max_workers=6, thread_name_prefix="readyz")
_running: dict[str, tuple[Future, float]] = {}
_running_lock = threading.Lock()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def check_database() -> tuple[bool, str]:
    """A NEW connection and `SELECT 1`: a pooled one still works while the postmaster is frozen
    or full, when no request could get a new one."""
    db = settings.DATABASES["default"]
    try:
        with psycopg.connect(
            dbname=db["NAME"], user=db["USER"], password=db["PASSWORD"], host=db["HOST"],
            port=db["PORT"], connect_timeout=2, application_name="tranche-readyz",
            options=f"-c statement_timeout={int(CHECK_DEADLINE * 1000)}",
        ) as conn:  # fmt: skip
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return False, f"PostgreSQL unreachable: {_first_line(exc)}"
    return True, "PostgreSQL ok"


def check_redis() -> tuple[bool, str]:
    client = redis.Redis.from_url(
        settings.REDIS_URL,
        socket_connect_timeout=CHECK_DEADLINE,
        socket_timeout=CHECK_DEADLINE,
        retry_on_timeout=False,
    )
    try:
        client.ping()
    except redis.RedisError as exc:
        return False, f"Redis unreachable at {_redacted(settings.REDIS_URL)}: {exc}"
    finally:
        client.close()
    return True, "Redis ok"


def check_processes() -> tuple[bool, str]:
    """Heartbeats of worker, beat and watcher (and silent node agents, informational)."""
    return heartbeats.check_processes()


# Checks of the controller scope that read rows, added by apps above core (the orders app: the
# reconcile backlog). Each returns (ok, message); they run after the heartbeats, same bounds.
CONTROLLER_ROW_CHECKS: dict[str, Check] = {}


def check_cluster() -> tuple[bool, str]:
    """The API server, as the last bounded probe saw it (`portal.core.cluster`)."""
    state = cluster.cluster_answers()
    if state.ok:
        return True, "the API server answers"
    since = time.monotonic() - (state.down_since or state.checked_at)
    return False, f"{state.message}, for {since:.0f}s; provisioning waits for it"


def check_rows(checks: dict[str, Check]) -> dict[str, tuple[bool, str]]:
    """Row-reading checks in this thread, one transaction under STATEMENT_TIMEOUT_MS."""
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL statement_timeout = {STATEMENT_TIMEOUT_MS}")
            return {name: check() for name, check in checks.items()}
    except DatabaseError as exc:
        connection.close()
        return {name: (False, f"unreadable: {_first_line(exc)}") for name in checks}


def run_bounded(checks: dict[str, Check], deadline: float = CHECK_DEADLINE) -> dict:
    """name -> (ok, message) of every check, within `deadline` seconds in all."""
    started = time.monotonic()
    futures: dict[str, Future] = {}
    results: dict[str, tuple[bool, str]] = {}
    with _running_lock:
        for name, check in checks.items():
            busy = _running.get(name)
            if busy is not None and not busy[0].done():
                age = started - busy[1]
                said = f"{LABELS.get(name, name)}: the check started {age:.1f}s ago still waits"
                results[name] = (False, said)
                continue
            future = _pool.submit(check)
            _running[name] = (future, started)
            futures[name] = future
    wait_futures(futures.values(), timeout=deadline)
    for name, future in futures.items():
        if not future.done():
            results[name] = (False, f"{LABELS.get(name, name)}: no answer within {deadline:.1f}s")
        elif future.exception() is not None:
            results[name] = (False, f"{name}: {_first_line(future.exception())}")
        else:
            results[name] = future.result()
    return {name: results[name] for name in checks}


def evaluate(scope: str = "") -> dict[str, tuple[bool, str]]:
    """name -> (ok, message) of every check of `scope` ("", "portal" or "controller"), bounded.

    - default: PostgreSQL (a new connection), Redis, and fresh worker/beat/watcher heartbeats;
    - "portal": PostgreSQL and Redis only;
    - "controller": the default plus the API server and the controller's row checks."""
    network = {"database": check_database, "redis": check_redis}
    if scope == "controller":
        network["cluster"] = check_cluster
    checks = run_bounded(network)
    if checks["database"][0] and scope != "portal":
        rows: dict[str, Check] = {"processes": check_processes}
        if scope == "controller":
            rows |= CONTROLLER_ROW_CHECKS
        checks |= check_rows(rows)
    return checks


# The checks each scope's verdict is made of (`evaluate`'s names; the controller's row checks
# are every other name), for the metrics that derive all three verdicts from one evaluation.
SCOPE_CHECKS = {"portal": ("database", "redis"), "": ("database", "redis", "processes")}


def verdicts(checks: dict[str, tuple[bool, str]]) -> dict[str, bool]:
    """scope -> ready, from one `evaluate("controller")` (a check it skipped, as the row checks
    are without PostgreSQL, counts as failed)."""
    ready = {scope: all(checks.get(n, (False, ""))[0] for n in names)
             for scope, names in SCOPE_CHECKS.items()}  # fmt: skip
    ready["controller"] = all(ok for ok, _ in checks.values())
    return ready


def _redacted(url: str) -> str:
    """Drop credentials from a URL before it goes into a response or a log. The host starts
    after the LAST '@' of the authority (a password may itself contain '@')."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))
