"""A Celery task goes through the real Redis broker to a real worker that writes PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from deploy.local.celery_worker import worker_argv
from deploy.supervisor import stop_pid, wait_until
from portal.core.models import WorkerHeartbeat
from portal.core.tasks import record_heartbeat

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def celery_worker_process(transactional_db, tmp_path):
    """A real worker on a queue of this test's own, pointed at the test database."""
    queue = f"test-{uuid.uuid4().hex[:8]}"
    name = f"{queue}@localhost"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TRANCHE_DEBUG": "1",
        "TRANCHE_DB_NAME": settings.DATABASES["default"]["NAME"],
    }
    log = (tmp_path / "worker.log").open("wb")
    proc = subprocess.Popen(
        worker_argv(queue, name=name, pool="solo"),
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    yield queue, name, tmp_path / "worker.log"
    stop_pid(proc.pid)


def test_task_round_trips_through_redis_to_postgres(celery_worker_process):
    queue, name, log = celery_worker_process
    record_heartbeat.apply_async(queue=queue)

    def written() -> bool:
        return WorkerHeartbeat.objects.filter(worker=name).exists()

    assert wait_until(written, 60, 0.2), f"no heartbeat row; worker log:\n{log.read_text()[-3000:]}"
    row = WorkerHeartbeat.objects.get(worker=name)
    assert row.beats == 1

    record_heartbeat.apply_async(queue=queue)
    assert wait_until(lambda: WorkerHeartbeat.objects.get(worker=name).beats == 2, 30, 0.2)
