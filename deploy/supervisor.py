"""The one process supervisor of `deploy/`: pid files, one liveness rule, and a restarting loop.

Liveness (used by the local platform and the local control plane alike): a process is ours and
alive when its pid file names a pid that exists, is not a zombie, and (when the caller knows
what it started) runs that program: `argv0` is the first or second word of its command line
(second: a `#!` script runs as `python script`). A reused pid therefore never counts.

`python -m deploy.supervisor SPEC STATUS` runs the restarting loop for `make run`: it starts every
process of SPEC (JSON `{name: {"argv": [...], "env": {...}}}`; the environment is the
supervisor's own plus `env`) in its own session with its log in `<state>/logs/<name>.log`,
restarts one that exits within `RESTART_DELAY_MAX` seconds (0.5 s after a first crash, doubling
while it keeps crashing), and keeps STATUS (JSON `{name: {pid, restarts, last_exit, since}}`)
current for `make status`. SIGHUP re-reads SPEC (new names start, removed ones stop); SIGTERM
stops every child (SIGTERM to its group, SIGKILL after `STOP_GRACE_SECONDS`) and exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
POLL_SECONDS = 0.2
RESTART_DELAY_FIRST = 0.5
RESTART_DELAY_MAX = 4.0  # + one poll: a crashed process is back within 5 s
STABLE_AFTER_SECONDS = 30.0  # a process that ran this long crashed "for the first time" again
STOP_GRACE_SECONDS = 10.0


# -- liveness and pid files ---------------------------------------------------------------------
def pid_alive(pid: int) -> bool:
    """The pid exists and is not a zombie (an exited child of ours is reaped on the way)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    if state == "Z":
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # ours: collect it; not ours: init will
        return False
    return True


def is_ours(pid: int, argv0: str | None = None) -> bool:
    """Alive, and (when `argv0` is given) running that program."""
    if not pid_alive(pid):
        return False
    if argv0 is None:
        return True
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2]
    except OSError:
        return False
    return argv0 in (w.decode(errors="replace") for w in words)


def read_pid(pidfile: Path, argv0: str | None = None) -> int | None:
    """The pid in `pidfile` if that process is ours and alive, else None."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if is_ours(pid, argv0) else None


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.1) -> T:
    """`wait_until` for a value: the predicate's first true result, or TimeoutError naming
    `what` (for callers that need what they waited for, e.g. the benchmarks)."""
    found: list[T] = []

    def probe() -> bool:
        value = predicate()
        if value:
            found.append(value)
        return bool(value)

    if not wait_until(probe, timeout, interval):
        raise TimeoutError(f"{what}: not after {timeout:.0f}s")
    return found[-1]


def spawn(argv: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start `argv` in its own session (Ctrl-C in the caller's terminal never reaches it),
    appending to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"\n=== start {time.strftime('%F %T')}: {' '.join(argv)}\n".encode())
        out.flush()
        return subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )  # fmt: skip


def start_detached(name: str, argv: list[str], state: Path, env: dict[str, str]) -> int:
    """Start `argv` once (pid file `state/run/<name>.pid`, log `state/logs/<name>.log`); returns
    its pid. Already running (per its pid file and argv[0]) means nothing is started."""
    pidfile = state / "run" / f"{name}.pid"
    pid = read_pid(pidfile, argv[0])
    if pid:
        return pid
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    proc = spawn(argv, state / "logs" / f"{name}.log", env)
    pidfile.write_text(f"{proc.pid}\n")
    return proc.pid


def stop_pid(pid: int, argv0: str | None = None, timeout: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM the process (its whole group when it leads one), SIGKILL what is left after
    `timeout` seconds; returns once it is gone. When it led its group, whatever is left of the
    group after the leader exited (a child that ignored SIGTERM) is SIGKILLed too, so stopping
    leaves no process of it behind (`make stop` must leave nothing of the stack)."""
    try:
        leads = is_ours(pid, argv0) and os.getpgid(pid) == pid
    except ProcessLookupError:
        return
    try:
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            if not is_ours(pid, argv0):
                return
            try:
                if leads:
                    os.killpg(pid, sig)
                else:
                    os.kill(pid, sig)
            except ProcessLookupError:
                return
            if wait_until(lambda: not is_ours(pid, argv0), wait, 0.05):
                return
    finally:
        if leads:
            _kill_group_leftovers(pid, timeout)


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of group `pgid`, from /proc/<pid>/stat."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()  # after "(comm)": state, ppid, pgrp, ...
        if len(fields) > 2 and fields[0] != "Z" and fields[2] == str(pgid):
            found.append(int(entry.name))
    return found


def _kill_group_leftovers(pgid: int, timeout: float) -> None:
    """SIGTERM then SIGKILL the members left in group `pgid` (its leader is gone: the group id
    cannot be reused while any member lives, so nothing else can be hit)."""

    def group_alive() -> bool:
        return bool(_group_members(pgid))

    for sig, wait in ((signal.SIGTERM, min(timeout, 2.0)), (signal.SIGKILL, 5.0)):
        if not group_alive():
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
        if wait_until(lambda: not group_alive(), wait, 0.05):
            return


def stop_named(name: str, state: Path, timeout: float = STOP_GRACE_SECONDS) -> bool:
    """Stop what `start_detached(name, ...)` started; True if it was running."""
    pidfile = state / "run" / f"{name}.pid"
    pid = read_pid(pidfile)
    if pid:
        stop_pid(pid, timeout=timeout)
    pidfile.unlink(missing_ok=True)
    return pid is not None


# -- the restarting loop ------------------------------------------------------------------------
@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    crashes_in_a_row: int = 0
    started_at: float = 0.0
    restart_at: float | None = None
    last_exit: int | None = None
    since: str = field(default_factory=lambda: time.strftime("%F %T"))


class Supervisor:
    """Keeps every process of a spec running; see the module docstring."""

    def __init__(self, spec: Path, status: Path, logs: Path) -> None:
        self.spec, self.status, self.logs = spec, status, logs
        self.children: dict[str, Child] = {}
        self.stopping = False
        self.reload = True

    def _start(self, child: Child) -> None:
        child.proc = spawn(child.argv, self.logs / f"{child.name}.log", {**os.environ, **child.env})
        child.started_at = time.monotonic()
        child.restart_at = None

    def _stop(self, child: Child) -> None:
        if child.proc is not None and child.proc.poll() is None:
            stop_pid(child.proc.pid)
            child.proc.wait()

    def load(self) -> None:
        wanted = json.loads(self.spec.read_text())
        for name in set(self.children) - set(wanted):
            self._stop(self.children.pop(name))
        for name, entry in wanted.items():
            child = self.children.get(name)
            if child is None or child.argv != entry["argv"] or child.env != entry.get("env", {}):
                if child is not None:
                    self._stop(child)
                child = self.children[name] = Child(name, entry["argv"], entry.get("env", {}))
                self._start(child)

    def tick(self) -> None:
        now = time.monotonic()
        for child in self.children.values():
            if child.restart_at is not None:
                if now >= child.restart_at:
                    child.restarts += 1
                    self._start(child)
                continue
            code = child.proc.poll() if child.proc else None
            if code is None:
                continue
            child.last_exit = code
            ran = now - child.started_at
            child.crashes_in_a_row = 1 if ran > STABLE_AFTER_SECONDS else child.crashes_in_a_row + 1
            delay = min(RESTART_DELAY_MAX, RESTART_DELAY_FIRST * 2 ** (child.crashes_in_a_row - 1))
            child.restart_at = now + delay
            with (self.logs / f"{child.name}.log").open("a") as out:
                out.write(f"=== supervisor: exited with {code} after {ran:.1f}s; "
                          f"restarting in {delay:.1f}s\n")  # fmt: skip

    def write_status(self) -> None:
        body = {
            c.name: {
                "pid": c.proc.pid if c.proc and c.restart_at is None else None,
                "restarts": c.restarts,
                "last_exit": c.last_exit,
                "since": c.since,
            }
            for c in self.children.values()
        }
        tmp = self.status.with_suffix(".tmp")
        tmp.write_text(json.dumps(body, indent=1))
        tmp.replace(self.status)

    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        signal.signal(signal.SIGINT, lambda *_: setattr(self, "stopping", True))
        signal.signal(signal.SIGHUP, lambda *_: setattr(self, "reload", True))
        while not self.stopping:
            if self.reload:
                self.reload = False
                self.load()
            self.tick()
            self.write_status()
            time.sleep(POLL_SECONDS)
        self.stop_all()
        self.status.unlink(missing_ok=True)

    def stop_all(self) -> None:
        """Stop every child at once, so the whole stop takes one grace period (plus the SIGKILL
        wait), not one per child: one after another, eight children that each used their 10 s
        outlasted `make stop`'s wait for the supervisor, which was then SIGKILLed and left the
        watcher and the agents running (bench/two_stacks.py found it)."""
        with ThreadPoolExecutor(max_workers=max(1, len(self.children))) as pool:
            list(pool.map(self._stop, self.children.values()))


def read_status(status: Path) -> dict[str, dict]:
    """What a running supervisor last wrote ({} when none runs)."""
    try:
        return json.loads(status.read_text())
    except (OSError, ValueError):
        return {}


if __name__ == "__main__":
    spec_path, status_path = Path(sys.argv[1]), Path(sys.argv[2])
    Supervisor(spec_path, status_path, status_path.parent.parent / "logs").run()
