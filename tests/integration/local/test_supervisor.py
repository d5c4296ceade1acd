"""The `make run` supervisor restarts a killed worker and a killed watcher within 5 s.

Real processes: a Celery worker on a queue of this test's own and the watcher (pointed at a
kube-apiserver address where nothing listens, so it also shows that a watcher without its API
keeps running and retrying). Both use the test database and this worktree's Redis.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from deploy import supervisor
from deploy.local.celery_worker import worker_argv

REPO = Path(__file__).resolve().parents[3]
RESTART_WITHIN_SECONDS = 5.0

pytestmark = pytest.mark.django_db(transaction=True)


def _kubeconfig(path: Path) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: nowhere\n"
        "clusters: [{name: nowhere, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: nobody, user: {token: x}}]\n"
        "contexts: [{name: nowhere, context: {cluster: nowhere, user: nobody}}]\n"
    )
    return path


@pytest.fixture
def supervised(tmp_path):
    queue = f"test-{uuid.uuid4().hex[:8]}"
    spec = {
        "worker": {
            "argv": worker_argv(queue, name=f"{queue}@localhost", pool="solo"),
            "env": {"TRANCHE_DB_POOL_MAX_SIZE": "2"},
        },
        "watcher": {
            "argv": [sys.executable, "-m", "controller.watch"],
            "env": {"KUBECONFIG": str(_kubeconfig(tmp_path / "kubeconfig"))},
        },
    }
    (tmp_path / "run").mkdir()
    spec_path, status_path = tmp_path / "run" / "spec.json", tmp_path / "run" / "status.json"
    spec_path.write_text(json.dumps(spec))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TRANCHE_DEBUG": "1",
        "TRANCHE_DB_NAME": settings.DATABASES["default"]["NAME"],
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "deploy.supervisor", str(spec_path), str(status_path)],
        cwd=REPO, env=env, start_new_session=True,
    )  # fmt: skip
    yield proc, status_path, tmp_path / "logs"
    supervisor.stop_pid(proc.pid, timeout=30)
    proc.wait(timeout=10)


def _status(path: Path) -> dict:
    return supervisor.read_status(path)


def _log(logs: Path, name: str, tail: int = 3000) -> str:
    path = logs / f"{name}.log"
    return path.read_text()[-tail:] if path.exists() else "(no log)"


def _logged(logs: Path, name: str, text: str) -> bool:
    return text in _log(logs, name, tail=10**7)


def test_killed_worker_and_watcher_are_back_within_5s(supervised) -> None:
    proc, status_path, logs = supervised
    assert supervisor.wait_until(
        lambda: (
            all(s.get("pid") for s in _status(status_path).values())
            and len(_status(status_path)) == 2
        ),
        30,
    ), _status(status_path)
    # Let both finish starting (the worker connects to Redis, the watcher sets Django up).
    assert supervisor.wait_until(lambda: _logged(logs, "worker", "ready"), 60), _log(logs, "worker")
    assert supervisor.wait_until(lambda: _logged(logs, "watcher", "watching"), 60)
    for name in ("worker", "watcher"):
        old = _status(status_path)[name]["pid"]
        os.kill(old, signal.SIGKILL)
        killed_at = time.monotonic()

        def back(name=name, old=old) -> bool:
            pid = _status(status_path)[name]["pid"]
            return bool(pid) and pid != old and supervisor.is_ours(pid)

        assert supervisor.wait_until(back, 10, 0.05), f"{name} not restarted:\n{_log(logs, name)}"
        took = time.monotonic() - killed_at
        print(f"{name}: SIGKILLed, running again after {took:.2f}s")  # noqa: T201
        assert took < RESTART_WITHIN_SECONDS
        row = _status(status_path)[name]
        assert row["restarts"] == 1
        assert row["last_exit"] == -signal.SIGKILL
    assert proc.poll() is None, "the supervisor itself exited"


def test_supervisor_stops_its_children(supervised) -> None:
    proc, status_path, _logs = supervised
    assert supervisor.wait_until(lambda: len(_status(status_path)) == 2, 30)
    pids = [s["pid"] for s in _status(status_path).values()]
    supervisor.stop_pid(proc.pid, timeout=30)
    assert not any(supervisor.is_ours(p) for p in pids if p), pids


def test_stopping_a_process_leaves_nothing_of_its_group(tmp_path):
    """Issue #30: `make stop` must leave no process of the stack. A child that ignores SIGTERM
    outlived its stopped leader; now what is left of the group is killed too."""
    from deploy import supervisor

    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
    leader = (
        "import subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-c', {stubborn!r}]); time.sleep(300)"
    )
    pid = supervisor.start_detached(
        "stubborn", [sys.executable, "-c", leader], tmp_path, dict(os.environ)
    )
    assert supervisor.wait_until(lambda: len(supervisor._group_members(pid)) == 2, 10)
    (child,) = [p for p in supervisor._group_members(pid) if p != pid]
    started = time.monotonic()
    supervisor.stop_pid(pid, timeout=2)
    took = time.monotonic() - started
    assert supervisor._group_members(pid) == []
    assert not supervisor.pid_alive(child)
    print(f"leader and its SIGTERM-ignoring child gone {took:.2f}s after stop")  # noqa: T201


def test_the_supervisor_stops_every_child_within_make_stops_wait(tmp_path):
    """Issue #30: `make stop` gives the supervisor 3 grace periods; it stopped its children one
    after another, each allowed a grace period, so with many slow ones it was SIGKILLed first and
    left the rest (the watcher and agents of two `make run` stacks) running. Five children that
    ignore SIGTERM: all stopped at once, gone within one grace period plus the SIGKILL wait."""
    from deploy import supervisor

    stubborn = (
        "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "open(sys.argv[1], 'w').close(); time.sleep(300)"
    )  # says so once SIGTERM is ignored
    marks = [tmp_path / f"slow{i}.ignoring" for i in range(5)]
    spec = {m.stem: {"argv": [sys.executable, "-c", stubborn, str(m)]} for m in marks}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    status = tmp_path / "run" / "status.json"
    status.parent.mkdir()
    argv = [sys.executable, "-m", "deploy.supervisor", str(tmp_path / "spec.json"), str(status)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    supervisor.start_detached("supervisor", argv, tmp_path, env)

    def pids() -> list[int]:
        return [c["pid"] for c in supervisor.read_status(status).values() if c["pid"]]

    assert supervisor.wait_until(lambda: all(m.exists() for m in marks), 30), marks
    children = pids()
    assert len(children) == 5, supervisor.read_status(status)
    started = time.monotonic()
    supervisor.stop_named("supervisor", tmp_path, timeout=3 * supervisor.STOP_GRACE_SECONDS)
    took = time.monotonic() - started
    left = [p for p in children if supervisor.pid_alive(p)]
    assert left == [], f"children left running after the supervisor stopped: {left}"
    assert took < 2 * supervisor.STOP_GRACE_SECONDS, took
    print(f"5 SIGTERM-ignoring children stopped with their supervisor in {took:.1f}s")  # noqa: T201
