"""Database faults are bounded (issue #30), against a PostgreSQL of this test's own (own data
folder and free port, started and stopped with `deploy.local.services`) behind a portal served
for real (`portal.serve`, the pool settings `make run` gives the portal):

- PostgreSQL stopped 10 s: every page request during the outage is a 503 naming the database
  within 1.5 s (p99; before: 10.0 s each, the pool's timeout), and pages are 200 again within
  2 s of PostgreSQL answering (before: 503 for 4.7 s, the pool's reconnect back-off).
- Postmaster frozen (SIGSTOP) 8 s: /readyz answers 503 within 1 s every time (before: "ready"
  after 9.2 s); ready again once it runs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

from deploy.local import platform, services
from tests.helpers.portal import free_port, serve_portal
from tests.helpers.wait import wait_for

ROOT = Path(__file__).resolve().parents[3]
OUTAGE_SECONDS = 10.0
FROZEN_SECONDS = 8.0

SETUP = """
import json, secrets
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
from portal.tenants.services import sign_up
tag = secrets.token_hex(3)
user, org, project = sign_up(username=f"db-{tag}", email=f"db{tag}@example.test",
    password="x-Pass-1234567", organization_name=f"db {tag}", project_name="ml")
store = SessionStore()
store[SESSION_KEY] = str(user.pk)
store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
store[HASH_SESSION_KEY] = user.get_session_auth_hash()
store.create()
cookie = f"{settings.SESSION_COOKIE_NAME}={store.session_key}"
print(json.dumps({"project": project.pk, "cookie": cookie}))
"""


def _get(url: str, cookie: str = "") -> tuple[int, str, float]:
    request = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})  # noqa: S310
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=20) as resp:  # noqa: S310 (loopback)
            code, body = resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        code, body = exc.code, exc.read().decode()
    except OSError as exc:
        code, body = 0, str(exc)
    return code, body, time.monotonic() - started


def _p99(values: list[float]) -> float:
    return (
        statistics.quantiles(values, n=100, method="inclusive")[98]
        if len(values) > 1
        else values[0]
    )


@pytest.fixture
def own_postgres(monkeypatch):
    state = Path(tempfile.mkdtemp(prefix="pgf", dir="/tmp"))
    lay = services.Layout(
        state=state, pg_port=free_port(), redis_port=0, pg_root=services._pg_root(state)
    )
    services.start_postgres(lay)
    env = {
        "TRANCHE_STATE_DIR": str(state), "TRANCHE_DB_PORT": str(lay.pg_port),
        "TRANCHE_REDIS_URL": settings.REDIS_URL, **platform.role_env("portal"),
    }  # fmt: skip
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TRANCHE_TEST_DB_NAME", raising=False)
    manage = [sys.executable, str(ROOT / "manage.py")]
    run_env = {**os.environ, "TRANCHE_DB_NAME": "tranche", "PYTHONPATH": str(ROOT)}
    try:  # a failed setup stops this PostgreSQL too, or it outlives the run
        subprocess.run([*manage, "migrate", "--noinput", "-v0"], env=run_env, cwd=ROOT, check=True)
        made = subprocess.run([*manage, "shell", "-c", SETUP], env=run_env, cwd=ROOT, check=True,
                              capture_output=True, text=True)  # fmt: skip
        yield lay, json.loads(made.stdout.strip().splitlines()[-1])
    finally:
        services.stop_postgres(lay)
        shutil.rmtree(lay.pg_root, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)


def _postmaster(lay: services.Layout) -> int:
    return int((lay.pg_data / "postmaster.pid").read_text().splitlines()[0])


def test_database_outages_get_fast_answers_and_heal(own_postgres):
    lay, made = own_postgres
    # One process: the gate is per process, and each process's first request of an outage
    # waits the pool timeout (~1 s) before it knows; with N processes N such requests.
    with serve_portal("tranche", processes=1) as portal:
        quota = f"{portal.http_base}/projects/{made['project']}/"
        readyz = f"{portal.http_base}/readyz?scope=portal"
        wait_for(lambda: _get(quota, made["cookie"])[0] == 200, 30, "the quota page",
                 portal.log_tail)  # fmt: skip

        # PostgreSQL stopped 10 s, a page every 0.25 s.
        assert services.stop_postgres(lay)
        down_at, during = time.monotonic(), []
        while time.monotonic() - down_at < OUTAGE_SECONDS:
            during.append(_get(quota, made["cookie"]))
            time.sleep(0.25)
        services.start_postgres(lay)
        back_at, after = time.monotonic(), None
        while after is None and time.monotonic() - back_at < 30:
            if _get(quota, made["cookie"])[0] == 200:
                after = time.monotonic() - back_at
        seconds = [s for _, _, s in during]
        wrong = [(code, body[:200]) for code, body, _ in during
                 if code != 503 or "the database" not in body]  # fmt: skip
        print(  # noqa: T201
            f"PostgreSQL down {OUTAGE_SECONDS:.0f}s: {len(during)} pages, p50 "
            f"{statistics.median(seconds):.3f}s p99 {_p99(seconds):.3f}s max {max(seconds):.3f}s; "
            f"first 200 {after}s after it returned"
        )
        assert not wrong, wrong[:3]
        assert _p99(seconds) <= 1.5, seconds
        assert after is not None, portal.log_tail()
        assert after <= 2.0, (after, portal.log_tail())

        # The postmaster frozen 8 s: every probe answers 503 within 1 s.
        wait_for(lambda: _get(readyz)[0] == 200, 30, "ready before the freeze", portal.log_tail)
        pid = _postmaster(lay)
        os.kill(pid, signal.SIGSTOP)
        probes = []
        try:
            frozen_at = time.monotonic()
            while time.monotonic() - frozen_at < FROZEN_SECONDS:
                probes.append(_get(readyz))
                time.sleep(0.5)
        finally:
            os.kill(pid, signal.SIGCONT)
        thawed = time.monotonic()
        wait_for(lambda: _get(readyz)[0] == 200, 10, "ready after the freeze", portal.log_tail)
        ready_again = time.monotonic() - thawed
    seconds = [s for _, _, s in probes]
    print(  # noqa: T201
        f"postmaster frozen {FROZEN_SECONDS:.0f}s: {len(probes)} probes, all "
        f"{sorted({c for c, _, _ in probes})}, max {max(seconds):.3f}s; ready {ready_again:.2f}s "
        f"after it ran again; first answer: {json.loads(probes[0][1]).get('message')}"
    )
    assert all(code == 503 for code, _, _ in probes), [(c, b[:200]) for c, b, _ in probes]
    assert max(seconds) <= 1.0, seconds
