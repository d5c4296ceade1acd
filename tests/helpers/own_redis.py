"""A redis-server of the test's own on a free loopback port, so stopping or restarting it never
disturbs the shared Redis of the worktree. Shared by the integration and cluster tiers."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

from deploy.supervisor import wait_until
from tests.helpers.portal import free_port


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


class OwnRedis:
    """redis-server with its data in `folder`; `append_only` keeps writes across a restart."""

    def __init__(self, folder: Path, *, append_only: bool = False) -> None:
        self.folder, self.port, self.append_only = folder, free_port(), append_only
        self.proc: subprocess.Popen | None = None
        folder.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder)]
        argv += ["--save", "", *(["--appendonly", "yes"] if self.append_only else [])]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert wait_until(lambda: port_open(self.port), 10), "redis did not start"

    def stop(self) -> None:
        """Terminate it (if it still runs) and wait until its port is closed."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        assert wait_until(lambda: not port_open(self.port), 10), "redis did not stop"
