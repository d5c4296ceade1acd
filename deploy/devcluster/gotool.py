"""The go tool for the dev cluster's builds: where go is, the build environment, one go command
run with its progress shown, and the machine-wide build lock.

Shared by the control plane's build (`deploy.devcluster.build`), the real nodes' containerd and
kube-router (`deploy.devcluster.node`), helm (`deploy.tools`) and the OCI test registry; it
imports none of them, so none of them imports another for these.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from deploy.devcluster.config import Settings

PROXY_HINT = (
    "The Go module proxy could not be reached or refused a module. Check `go env GOPROXY` and "
    "network access, or copy a filled module cache (GOMODCACHE, ~/go/pkg/mod) from a machine "
    "that has built once and set GOFLAGS=-mod=mod GOPROXY=off; see docs/devcluster.md."
)


class BuildError(RuntimeError):
    """The Go build failed; the message holds the command, its output and what to do."""


def find_go() -> str:
    """Locate the go tool: $GO, then PATH, then the usual /usr/local/go install."""
    candidates = [os.environ.get("GO"), shutil.which("go"), "/usr/local/go/bin/go"]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return candidate
    raise BuildError("go toolchain not found: install Go >= 1.26 or set GO=/path/to/go")


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    # go.sum is committed: never rewrite it during a build, and never fetch a
    # newer toolchain behind the caller's back (GOTOOLCHAIN may still be set
    # explicitly by the caller).
    env["GOFLAGS"] = "-mod=readonly"
    env.setdefault("GOTOOLCHAIN", "local")
    env.setdefault("CGO_ENABLED", "0")
    return env


def run_go(args: list[str], cwd: Path, label: str, env: dict[str, str] | None = None) -> None:
    """Run one go command (`env` added to the build environment), echoing each compiled
    package as progress."""
    print(f"[build] {label}: go {' '.join(args[:2])} ... (in {cwd.name}/)", flush=True)
    started = time.monotonic()
    proc = subprocess.Popen(
        [find_go(), *args],
        cwd=cwd,
        env={**go_env(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    tail: list[str] = []
    count = 0
    for raw in proc.stdout:
        line = raw.rstrip()
        tail = [*tail[-40:], line]
        # `go build -v` prints one package path per compiled package: show a
        # running count rather than hundreds of lines.
        if line and not line.startswith(("go:", "#")) and " " not in line:
            count += 1
            if count % 50 == 0:
                elapsed = time.monotonic() - started
                print(f"[build] {label}: {count} packages compiled ({elapsed:.0f}s)", flush=True)
        else:
            print(f"[build] {line}", flush=True)
    code = proc.wait()
    elapsed = time.monotonic() - started
    if code != 0:
        output = "\n".join(tail)
        raise BuildError(
            f"{label} failed (exit {code}) after {elapsed:.0f}s: go {' '.join(args)}\n"
            f"{output}\n{PROXY_HINT if args[0] == 'mod' or 'proxy' in output else ''}"
        )
    compiled = f" ({count} packages compiled)" if count else ""
    print(f"[build] {label}: done in {elapsed:.0f}s{compiled}", flush=True)


@contextlib.contextmanager
def machine_file_lock(path: Path, waiting: str) -> Iterator[None]:
    """Hold an exclusive lock on `path` (made if missing) for the block; says `waiting` once
    when another session on the machine holds it, then waits its turn."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(waiting, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def build_lock(settings: Settings) -> contextlib.AbstractContextManager[None]:
    """Serialise builds: several test sessions on one machine share one cache."""
    return machine_file_lock(
        settings.bin_dir / ".build.lock",
        "[build] another build of this version is running; waiting for it",
    )
