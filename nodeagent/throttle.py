"""Holding a claim's pods to a compute share with the cgroup freezer, duty-cycled.

The compute backstop (`nodeagent/compute_watch.py`) acts on the claim, not on one process: every
process of the claim's pods is in the pod's cgroup (a tenant cannot leave it, and a process it
starts again is born there), so freezing that cgroup for part of every `PERIOD_S` holds them
all, restarted ones included. A frozen process launches nothing; the device finishes what was
queued before, which the collector's duty control (`compute_watch.next_duty`) absorbs.

The freezer is the cgroup v2 `cgroup.freeze` file ("1"/"0") of the pod's cgroup, or on cgroup
v1 the freezer hierarchy's `freezer.state` ("FROZEN"/"THAWED"); both freeze the pod's
container cgroups beneath it. `pod_freezers` finds the pod's cgroup from a process's
/proc/<pid>/cgroup text (nodeagent/owners.py reads it from the process or any of its threads)
under the host's cgroup mount (`root`).

One thread runs every held claim's cycle, in phase: all thawed at the start of a period, each
frozen again once its duty is spent. `release` and `close` thaw for good: a held pod is never
left frozen by the agent stopping. An agent killed outright (SIGKILL, OOM) leaves a pod it
held frozen until the pod is deleted (docs/nodeagent.md, the backstop).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from nodeagent.owners import pod_cgroup_paths

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
PERIOD_S = 0.1
_V2 = ("cgroup.freeze", "1", "0")
_V1 = ("freezer.state", "FROZEN", "THAWED")


def pod_freezers(texts: list[str], root: Path = CGROUP_ROOT) -> list[Path]:
    """The freezer files of the pod cgroup(s) named in these /proc cgroup texts (one process's
    and its threads'): v1's freezer hierarchy where there is one, else the v2 cgroup. The
    path is the reader's view: relative ("/../..") inside a private cgroup namespace, so a pod
    cgroup not found at it under `root` is looked up by its own name (pod<uid> or
    kubepods-…-pod<uid>.slice, unique on the node) a few levels down."""
    v1: list[tuple[Path, str, str]] = []  # (hierarchy's mount, pod's path, freezer file)
    v2: list[tuple[Path, str, str]] = []
    unified = root if (root / "cgroup.controllers").exists() else root / "unified"
    for text in texts:
        for hierarchy, controllers, pod_path in pod_cgroup_paths(text):
            if "freezer" in controllers.split(","):
                v1.append((root / "freezer", pod_path, _V1[0]))
            elif hierarchy == "0" and controllers == "":
                v2.append((unified, pod_path, _V2[0]))
    found = []
    for base, pod_path, name in v1 or v2:
        directory = _pod_dir(base, pod_path)
        if directory is not None and (directory / name).exists():
            found.append(directory / name)
    return list(dict.fromkeys(found))


def _pod_dir(base: Path, pod_path: str) -> Path | None:
    parts = [p for p in pod_path.split("/") if p and p != ".."]
    direct = base.joinpath(*parts)
    if parts and direct.is_dir():
        return direct
    return _find(base, parts[-1], depth=5) if parts else None


def _find(base: Path, name: str, depth: int) -> Path | None:
    """The folder called `name` at most `depth` levels under `base` (breadth first)."""
    level = [base]
    for _ in range(depth):
        below = []
        for d in level:
            try:
                subs = [e for e in os.scandir(d) if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            for e in subs:
                if e.name == name:
                    return Path(e.path)
                below.append(Path(e.path))
        level = below
    return None


def _write(path: Path, frozen: bool) -> None:
    _name, freeze, thaw = _V1 if path.name == _V1[0] else _V2
    try:
        path.write_text(freeze if frozen else thaw)
    except OSError as exc:  # the pod went away meanwhile
        log.debug("cannot write %s: %s", path, exc)


@dataclass
class Hold:
    """One held claim on one GPU: its pods' freezer files and the thawed fraction."""

    freezers: tuple[Path, ...]
    duty: float
    until: float  # monotonic
    reason: str  # what the tenant reads (the pod's status report carries it)


class Throttle:
    """Duty-cycles the freezers of held claims on a thread of its own; keys are (claim, GPU)."""

    def __init__(self, period_s: float = PERIOD_S) -> None:
        self.period_s = period_s
        self._held: dict[tuple[str, str], Hold] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, key: tuple[str, str], freezers: list[Path], duty: float, until: float,
             reason: str) -> None:  # fmt: skip
        with self._lock:
            self._held[key] = Hold(tuple(freezers), duty, until, reason)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="throttle", daemon=True)
                self._thread.start()
        self._wake.set()

    def held(self, key: tuple[str, str]) -> Hold | None:
        with self._lock:
            return self._held.get(key)

    def set_duty(self, key: tuple[str, str], duty: float) -> None:
        with self._lock:
            if key in self._held:
                self._held[key].duty = duty

    def release(self, key: tuple[str, str]) -> None:
        with self._lock:
            hold = self._held.pop(key, None)
            if hold is not None:
                for f in self._unshared(hold.freezers):
                    _write(f, frozen=False)

    def held_keys(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._held)

    def close(self) -> None:
        """Thaw every held pod and stop the thread."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            for hold in self._held.values():
                for f in hold.freezers:
                    _write(f, frozen=False)
            self._held.clear()

    def _unshared(self, freezers: tuple[Path, ...]) -> list[Path]:
        """Of these files, those no other held claim freezes too (two claims, one pod)."""
        others = {f for h in self._held.values() for f in h.freezers}
        return [f for f in freezers if f not in others]

    def _run(self) -> None:
        while not self._stop.is_set():
            start = time.monotonic()
            with self._lock:
                holds = sorted(self._held.items(), key=lambda kv: kv[1].duty)
                for _key, hold in holds:
                    for f in hold.freezers:
                        _write(f, frozen=False)
            if not holds:
                self._wake.wait(1.0)
                self._wake.clear()
                continue
            for key, hold in holds:
                if hold.duty >= 1.0:
                    continue
                self._stop.wait(max(0.0, start + hold.duty * self.period_s - time.monotonic()))
                with self._lock:
                    if self._held.get(key) is hold and not self._stop.is_set():
                        for f in hold.freezers:
                            _write(f, frozen=True)
            self._stop.wait(max(0.0, start + self.period_s - time.monotonic()))
