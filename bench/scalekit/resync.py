"""The no-op resync figure: what beat runs (`controller.tasks.resync`: every project against the
cluster, then the metering ledger against the cluster's claims), timed and counted.

`measure_noop_resync()` runs it in this process (django.setup() done, the controller's cluster
configured) and returns the duration, the API calls by verb, the LISTs by resource (one each when
the reads are per kind, not per project), the GETs, the writes, and the database queries it
issued (counted with `connection.execute_wrapper`, by statement). Run it on a settled fleet: a
resync that finds work does it, and its writes are reported, not hidden.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from typing import Any


def measure_noop_resync(runs: int = 1) -> dict[str, Any]:
    """Run the periodic resync `runs` times; the median duration and the last run's counts.

    Keys: projects, seconds (median), seconds_each, writes (API applies and deletes, all runs),
    calls (verb -> count), lists_by_kind (resource -> LISTs), gets, queries (all statements the
    resync issued), queries_by_statement (SELECT/INSERT/UPDATE/...), db_writes (INSERT, UPDATE
    and DELETE statements, all runs), ledger (records opened/closed by the last run)."""
    from django.db import connection

    from controller.apply import Applier, shared_api_client
    from controller.tasks import resync

    seconds: list[float] = []
    writes = db_writes = 0
    for _ in range(max(1, runs)):
        applier = Applier(shared_api_client())
        statements: Counter[str] = Counter()
        with connection.execute_wrapper(_counting(statements)):
            started = time.perf_counter()
            summary = resync(applier)
            seconds.append(time.perf_counter() - started)
        writes += applier.writes
        db_writes += sum(statements[s] for s in ("INSERT", "UPDATE", "DELETE"))
    return {
        "projects": summary["projects"],
        "seconds": round(statistics.median(seconds), 3),
        "seconds_each": [round(s, 3) for s in seconds],
        "writes": writes,
        "calls": dict(applier.calls),
        "lists_by_kind": dict(applier.lists),
        "gets": applier.calls["get"],
        "queries": sum(statements.values()),
        "queries_by_statement": dict(statements),
        "db_writes": db_writes,
        "ledger": summary["ledger"],
    }


def _counting(statements: Counter[str]):
    """A Django execute wrapper counting each statement by its first word (SELECT, UPDATE...)."""

    def count(execute, sql, params, many, context):
        statements[sql.lstrip().split(None, 1)[0].upper()] += 1
        return execute(sql, params, many, context)

    return count
