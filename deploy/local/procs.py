"""Small helpers to start detached processes with pid files and stop them without orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def read_pid(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def start_detached(name: str, argv: list[str], state: Path, env: dict[str, str]) -> int:
    """Start `argv` in its own session, logging to state/logs/<name>.log; returns its pid.

    Already running (per its pid file) means nothing is started, so callers are idempotent.
    """
    pidfile = state / "run" / f"{name}.pid"
    pid = read_pid(pidfile)
    if pid:
        return pid
    (state / "run").mkdir(parents=True, exist_ok=True)
    (state / "logs").mkdir(parents=True, exist_ok=True)
    log = (state / "logs" / f"{name}.log").open("ab")
    proc = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    pidfile.write_text(str(proc.pid))
    return proc.pid


def stop_pid(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM the process group, then SIGKILL what is left after `timeout` seconds."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            # Whole group when pid leads one (our detached children do), else the process alone.
            if os.getpgid(pid) == pid:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            return
        if wait_until(lambda: not pid_alive(pid), wait):
            return


def stop_named(name: str, state: Path) -> bool:
    pidfile = state / "run" / f"{name}.pid"
    pid = read_pid(pidfile)
    if pid:
        stop_pid(pid)
    pidfile.unlink(missing_ok=True)
    return pid is not None


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
