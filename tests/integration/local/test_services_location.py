"""The project-owned PostgreSQL starts even from a checkout the `postgres` user cannot reach
(a clone under /root, say): its data then lives in a folder of the checkout's own in /var/tmp."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from deploy.local import services

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="only root hands PostgreSQL to the postgres user"
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_postgres_moves_out_of_an_unreachable_state_folder(tmp_path, monkeypatch):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    state = private / "checkout" / ".state"
    monkeypatch.setenv("TRANCHE_STATE_DIR", str(state))
    monkeypatch.setenv("TRANCHE_DB_PORT", str(_free_port()))
    monkeypatch.delenv("TRANCHE_DB_HOST", raising=False)
    lay = services.layout()
    assert str(lay.pg_root).startswith("/var/tmp/tranche-pg-")
    try:
        line = services.start_postgres(lay)
        assert str(lay.pg_data) in line
        version = subprocess.run(
            ["psql", "-h", "127.0.0.1", "-p", str(lay.pg_port), "-U", "tranche", "-d", "tranche",
             "-tAc", "SELECT 1"],
            env={**os.environ, "PGPASSWORD": (state / "secrets" / "db-password").read_text()},
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert version.stdout.strip() == "1", version.stderr
    finally:
        services.stop_postgres(lay)
        subprocess.run(["rm", "-rf", str(lay.pg_root)], check=False)
