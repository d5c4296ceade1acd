"""The local platform behind `make run`: services, database, demo data and long-running processes.

Processes run detached (own session, pid file, log under `.state/logs/`) so `make run` returns once
the portal answers, and `make stop` ends them all. Already-running processes are left alone, which
makes a second `make run` take seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from deploy.local import procs, services

REPO = services.REPO
VENV_BIN = Path(sys.executable).parent


class PlatformError(RuntimeError):
    """A platform step failed; the message names the step and its log."""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TRANCHE_DEBUG", "1")
    env.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    env["PYTHONPATH"] = str(REPO)
    return env


def _port() -> int:
    return int(os.environ.get("TRANCHE_PORT", "8000"))


def processes() -> dict[str, list[str]]:
    """Name -> argv of every long-running process of the local platform."""
    state = services.layout().state
    return {
        "portal": [
            str(VENV_BIN / "daphne"),
            "-b",
            "127.0.0.1",
            "-p",
            str(_port()),
            "portal.asgi:application",
        ],
        "worker": [
            str(VENV_BIN / "celery"),
            "-A",
            "portal",
            "worker",
            "-l",
            "info",
            "-Q",
            os.environ.get("TRANCHE_CELERY_QUEUE", "tranche"),
            "--concurrency",
            "2",
            "-n",
            "worker@%h",
        ],
        "beat": [
            str(VENV_BIN / "celery"),
            "-A",
            "portal",
            "beat",
            "-l",
            "info",
            "-s",
            str(state / "celerybeat-schedule"),
        ],
        # Turns cluster events into portal state (claims allocated/pending, pod phases).
        "watcher": [sys.executable, "-m", "controller.watch"],
    }


def _manage(*args: str) -> str:
    res = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), *args],
        env=_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        raise PlatformError(f"manage.py {' '.join(args)} failed:\n{res.stderr.strip()}")
    return res.stdout


def _portal_healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as resp:  # noqa: S310 (loopback)
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _cluster_up() -> None:
    """Start the local control plane (built on first use; minutes cold, seconds warm)."""
    if os.environ.get("KUBECONFIG"):
        print(f"Kubernetes: using existing cluster from KUBECONFIG={os.environ['KUBECONFIG']}")
        return
    res = subprocess.run([sys.executable, "-m", "deploy.devcluster", "up"], cwd=REPO, check=False)
    if res.returncode != 0:
        raise PlatformError("the local control plane did not start (see the lines above)")
    from kubernetes import config

    from deploy.devcluster.config import load_settings
    from deploy.devcluster.storage import ensure_demo_volumes

    api = config.new_client_from_config(str(load_settings().kubeconfig))
    try:
        created = ensure_demo_volumes(api)
    finally:
        api.close()
    print(f"demo storage: default StorageClass and static volumes ready ({created} created)")


def run() -> None:
    for line in services.up():
        print(line)
    _cluster_up()
    _manage("migrate", "--noinput")
    print("database migrated")
    print(_manage("seed_demo").strip())
    state = services.layout().state
    for name, argv in processes().items():
        pid = procs.start_detached(name, argv, state, _env())
        print(f"{name}: pid {pid}, log {state / 'logs' / (name + '.log')}")
    url = f"http://127.0.0.1:{_port()}"
    if not procs.wait_until(lambda: _portal_healthy(url), 60, 0.25):
        raise PlatformError(f"the portal did not answer {url}/healthz; see {state}/logs/portal.log")
    from deploy.local import agents

    for line in agents.start(state, _env(), _port()):
        print(line)
    print(f"\nTranche portal: {url}/   (readiness: {url}/readyz, admin: {url}/admin/)")
    print(f"Tenants' kubeconfig: {url}/access/   (log in as a tenant, 'Download kubeconfig')")
    print("Stop everything with: make stop")


def stop() -> None:
    from deploy.local import agents

    state = services.layout().state
    agents.stop(state)
    for name in processes():
        if procs.stop_named(name, state):
            print(f"{name} stopped")
    services.down()
    print("PostgreSQL and Redis stopped")
    if not os.environ.get("KUBECONFIG"):
        subprocess.run([sys.executable, "-m", "deploy.devcluster", "down"], cwd=REPO, check=False)


def status() -> None:
    state = services.layout().state
    for name in processes():
        pid = procs.read_pid(state / "run" / f"{name}.pid")
        print(f"{name}: {'running, pid ' + str(pid) if pid else 'stopped'}")
