"""A real Celery worker as a subprocess, for the cluster tier: start, stop, and a `worker` fixture.

The worker consumes the test's private queue, writes the test's database and talks to the test's
API server; its output goes to a log file the tests read ("ready." and their own diagnostics).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from deploy.local.celery_worker import worker_argv
from tests.helpers.wait import wait_for

ROOT = Path(__file__).resolve().parents[2]


def start_worker(
    queue: str, kubeconfig: Path, log: Path, *, concurrency: int = 1, debug: bool = True
) -> subprocess.Popen:
    """A worker on `queue` in a session of its own (so a signal reaches its children too)."""
    env = {
        **os.environ,
        "TRANCHE_CELERY_QUEUE": queue,
        "KUBECONFIG": str(kubeconfig),
        "TRANCHE_DB_NAME": connection.settings_dict["NAME"],
        "PYTHONPATH": str(ROOT),
    }
    if debug:
        env["TRANCHE_DEBUG"] = "1"
    name = f"{queue}-{secrets.token_hex(2)}@localhost"
    cmd = worker_argv(queue, name=name, concurrency=concurrency)
    with log.open("ab") as out:
        return subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop_worker(proc: subprocess.Popen) -> None:
    """SIGTERM (a warm shutdown), then SIGKILL after 20 s; nothing if it already ended."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


@pytest.fixture
def worker(controller_settings, kube_cluster, tmp_path) -> Iterator[Path]:
    """A real Celery worker on the test's private queue and database; stopped afterwards.
    Yields its log. Import it by name into the conftest.py or test module that uses it."""
    queue = controller_settings.CELERY_TASK_DEFAULT_QUEUE
    log = tmp_path / "worker.log"
    proc = start_worker(queue, kube_cluster.kubeconfig, log)
    try:
        wait_for(lambda: b"ready." in log.read_bytes(), 60, "the Celery worker to start")
        yield log
    finally:
        stop_worker(proc)
