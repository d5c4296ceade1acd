"""The Celery worker exactly as `make run` starts it (its argv, under `deploy.supervisor`, which
restarts it if it exits), on a test's own queue and Redis: for the Redis fault tests, which
count the worker's restarts and read its log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from deploy import supervisor
from deploy.local import platform

ROOT = Path(__file__).resolve().parents[3]


def make_run_worker(queue: str) -> list[str]:
    """The worker command line `make run` uses, on this test's queue."""
    argv = list(platform.processes()["worker"])
    argv[argv.index("-Q") + 1] = queue
    argv[argv.index("-n") + 1] = f"{queue}@localhost"
    return argv


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class SupervisedWorker:
    process: subprocess.Popen  # the supervisor
    status: Path  # what it last wrote about the worker (pid, restarts)
    log: Path

    def state(self) -> dict:
        return supervisor.read_status(self.status)["worker"]

    def stop(self) -> None:
        supervisor.stop_pid(self.process.pid, timeout=30)
        self.process.wait(10)


def start_worker(tmp_path: Path, queue: str, redis_url: str, kubeconfig: Path, database: str,
                 **env: str) -> SupervisedWorker:  # fmt: skip
    """Start the supervised worker on `queue` of `redis_url` (`env`: more of its environment)."""
    spec = {"worker": {"argv": make_run_worker(queue), "env": {
        "TRANCHE_REDIS_URL": redis_url, "TRANCHE_CELERY_QUEUE": queue,
        "KUBECONFIG": str(kubeconfig), "TRANCHE_DB_NAME": database,
        "TRANCHE_DB_POOL_MAX_SIZE": "2", "PYTHONPATH": str(ROOT), **env}}}  # fmt: skip
    run = tmp_path / "run"
    run.mkdir()
    (run / "spec.json").write_text(json.dumps(spec))
    status = run / "status.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "deploy.supervisor", str(run / "spec.json"), str(status)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True,
    )  # fmt: skip
    return SupervisedWorker(process, status, tmp_path / "logs" / "worker.log")
