"""The argv of a Celery worker of the portal app, in one place for every worker that runs one.

The supervised platform worker (`make run`), the test tiers' workers and the bench's workers all
start the same program with the same flags; only the queue, name, concurrency and pool differ.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

PYTHON_CELERY = (sys.executable, "-m", "celery")


def worker_argv(
    queue: str,
    *,
    name: str | None = None,
    concurrency: int | None = None,
    pool: str | None = None,
    loglevel: str = "info",
    celery: Sequence[str] = PYTHON_CELERY,
) -> list[str]:
    """argv of `celery -A portal worker` consuming `queue` (Celery's defaults where None)."""
    argv = [*celery, "-A", "portal", "worker", "-Q", queue, "-l", loglevel]
    if name:
        argv += ["-n", name]
    if concurrency is not None:
        argv += ["--concurrency", str(concurrency)]
    if pool:
        argv += ["--pool", pool]
    # Gossip and mingle (worker-to-worker sync) are unused here, and their channels' close path
    # is where kombu meets a connection whose client is already None when Redis drops: "Error on
    # restarting Gossip: AttributeError" (kombu#582/#970 family).
    return [*argv, "--without-gossip", "--without-mingle"]
