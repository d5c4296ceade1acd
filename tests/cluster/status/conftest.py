"""The controller tier's fixtures (tenants with orders) and a real Celery worker for the status
tests."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from tests.cluster.controller.conftest import (  # noqa: F401 - fixtures by name
    applier,
    controller_settings,
    make_tenant,
    tenant,
)
from tests.helpers.wait import wait_for

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def worker(controller_settings, kube_cluster, tmp_path) -> Iterator[Path]:  # noqa: F811
    """A real Celery worker on the test's private queue and database; stopped afterwards."""
    queue = controller_settings.CELERY_TASK_DEFAULT_QUEUE
    log = tmp_path / "worker.log"
    env = {
        **os.environ,
        "TRANCHE_CELERY_QUEUE": queue,
        "KUBECONFIG": str(kube_cluster.kubeconfig),
        "TRANCHE_DB_NAME": connection.settings_dict["NAME"],
        "TRANCHE_DEBUG": "1",
        "PYTHONPATH": str(ROOT),
    }
    cmd = [
        *(sys.executable, "-m", "celery", "-A", "portal", "worker", "-Q", queue),
        *("-n", f"{queue}-{secrets.token_hex(2)}@localhost", "-c", "1"),
        *("--without-mingle", "--without-gossip", "-l", "info"),
    ]
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    wait_for(lambda: b"ready." in log.read_bytes(), 60, "the Celery worker to start")
    yield log
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
