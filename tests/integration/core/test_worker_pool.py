"""A prefork Celery worker keeps its pooled PostgreSQL connections across tasks (issue #35).

Celery's Django fixup closed the pool around every task, so each task opened new connections.
The worker here is the real one (`deploy.local.celery_worker.worker_argv`, prefork, one child)
on the test's database and a queue of its own; PostgreSQL's own session counter
(`pg_stat_database.sessions`) says how many connections were opened while it ran 20 tasks.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from deploy.local.celery_worker import worker_argv
from deploy.supervisor import stop_pid
from portal.core.models import WorkerHeartbeat
from portal.core.tasks import record_heartbeat
from tests.helpers.wait import wait_for

REPO = Path(__file__).resolve().parents[3]
TASKS = 20
POOL = 2


def _sessions() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT pg_stat_clear_snapshot()")
        cur.execute(
            "SELECT sessions FROM pg_stat_database WHERE datname = %s",
            [settings.DATABASES["default"]["NAME"]],
        )
        return cur.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_a_prefork_worker_reuses_its_pooled_connections_across_tasks(tmp_path):
    queue = f"test-{uuid.uuid4().hex[:8]}"
    name = f"{queue}@localhost"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TRANCHE_DEBUG": "1",
        "TRANCHE_DB_NAME": settings.DATABASES["default"]["NAME"],
        "TRANCHE_DB_POOL_MAX_SIZE": str(POOL),
        "TRANCHE_DB_POOL_MIN_SIZE": "1",
    }
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            worker_argv(queue, name=name, concurrency=1), cwd=REPO, env=env, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        record_heartbeat.apply_async(queue=queue)  # the child's first task opens its pool
        wait_for(lambda: WorkerHeartbeat.objects.filter(worker=name).exists(), 60,
                 "the worker's first task", lambda: log.read_text()[-3000:])  # fmt: skip
        before = _sessions()
        for _ in range(TASKS):
            record_heartbeat.apply_async(queue=queue)
        wait_for(lambda: WorkerHeartbeat.objects.get(worker=name).beats == TASKS + 1, 60,
                 f"{TASKS} more tasks", lambda: log.read_text()[-3000:])  # fmt: skip
        opened = _sessions() - before
    finally:
        stop_pid(proc.pid)
    print(f"connections opened for {TASKS} tasks: {opened} ({opened / TASKS:.2f} per task)")  # noqa: T201 (-s shows the figure)
    # Our own test connection's session is counted once at most; the pool may replace one.
    assert opened <= POOL + 1, f"{opened} connections opened for {TASKS} tasks"
