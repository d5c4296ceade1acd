"""The portal served for real (`python -m portal.serve`, two processes, on a free port, real
Redis channel layer, the test PostgreSQL database), for tests whose agents connect over a
websocket. Shared by the
integration and cluster tiers."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from portal import serve

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Portal:
    url: str  # ws://127.0.0.1:<port>/ws/agent/
    log: Path  # the server's stdout and stderr, for failure messages

    def log_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    @property
    def http_base(self) -> str:
        """The portal's http:// root (`url` names the agents' websocket)."""
        return self.url.replace("ws://", "http://").removesuffix("/ws/agent/")


def signed_in_context(browser, user, base: str):
    """A new playwright browser context of `base`, signed in as `user` (a session made by
    Django's test client); the caller closes it."""
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    context = browser.new_context(base_url=base)
    try:
        context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": base}])
    except BaseException:
        context.close()
        raise
    return context


@contextmanager
def serve_portal(db_name: str, timeout: float = 30, processes: int = 2) -> Iterator[Portal]:
    """Start the portal's server (two processes, as on a 2-core node: a socket and the page may
    land on different processes) on the test database; stopped (and waited for) even if the
    test fails."""
    port = free_port()
    env = dict(os.environ, TRANCHE_DEBUG="1", TRANCHE_DB_NAME=db_name)
    env["TRANCHE_DB_CONN_MAX_AGE"] = "0"
    env["TRANCHE_SIGNUP_PER_ADDRESS_PER_HOUR"] = env["TRANCHE_SIGNUP_PER_HOUR"] = "1000000"
    log = Path(tempfile.mkstemp(prefix="tr-portal-", suffix=".log")[1])
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, *serve.argv(port, processes=processes)],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    portal = Portal(f"ws://127.0.0.1:{port}/ws/agent/", log)
    try:
        deadline = time.monotonic() + timeout
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"the portal did not listen on port {port} within {timeout:.0f}s "
                    f"(exit {proc.poll()}):\n{portal.log_tail()}"
                )
            time.sleep(0.1)
        yield portal
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # the server and its processes
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
