"""A real OCI registry on loopback, go-containerregistry's, built from the Go proxy: for the
pre-flight tests and for `make run`'s sample images (`samples.py`, `__main__.py`).

`ensure_built()` builds `go/` into `~/.cache/tranche/ociregistry-<hash>/registry` once (the same
lock and go environment as the control-plane build); `start()` runs it on 127.0.0.1 with a free
port. Never downloads a binary.
"""

from __future__ import annotations

import hashlib
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from deploy.devcluster.config import load_settings
from deploy.devcluster.gotool import run_go

SOURCE = Path(__file__).parent / "go"


def _source_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted(SOURCE.glob("*")):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def ensure_built() -> Path:
    """The registry binary for the current sources, built if missing (idempotent)."""
    out_dir = load_settings().cache_dir / f"ociregistry-{_source_hash()}"
    binary = out_dir / "registry"
    if binary.is_file():
        return binary
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / "registry.tmp"
    run_go(["build", "-trimpath", "-o", str(tmp), "."], SOURCE, "build OCI test registry")
    tmp.replace(binary)
    return binary


@dataclass
class Registry:
    process: subprocess.Popen
    port: int

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def start(
    state_dir: Path,
    timeout: float = 30,
    address: str = "127.0.0.1:0",
    seal_file: Path | None = None,
) -> Registry:
    """Run the registry on `address` (a free loopback port by default); returns once it listens.
    With `seal_file`, the registry refuses every write once that file exists."""
    binary = ensure_built()
    state_dir.mkdir(parents=True, exist_ok=True)
    port_file = state_dir / "registry.port"
    port_file.unlink(missing_ok=True)
    log = (state_dir / "registry.log").open("ab")
    proc = subprocess.Popen(
        [
            str(binary),
            "-addr",
            address,
            "-port-file",
            str(port_file),
            *(["-seal-file", str(seal_file)] if seal_file else []),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + timeout
    while not port_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the OCI test registry did not start; see {state_dir}/registry.log")
        time.sleep(0.05)
    return Registry(proc, int(port_file.read_text()))
