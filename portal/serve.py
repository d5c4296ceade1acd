"""The portal's server: uvicorn, one process per core, every process on one listening socket.

One command line for every place the portal runs (`make run`, the benches, the chart):
`python -m portal.serve [--host H] [--port P] [--processes N] [--role pages|ingest]`.

Why this model (issue #35, measured in docs/benchmarks.md, "Many tenants per core"): one daphne
process saturated at ~0.9 core (quota page ~45 requests/s, `/healthz` ~207/s) because Django's sync
views run on one thread per process. uvicorn's `--workers` forks N processes that accept on the same
socket (the kernel spreads connections), supervises them (a dead one is replaced), and parses
HTTP with httptools in C; daphne has no multi-process mode of its own. The processes share
nothing but PostgreSQL and Redis: sessions are rows, the channel layer is Redis pub/sub and the
per-project figures' cache is Redis (`portal.core.figures`), so any process may serve any
request or socket.

`--role ingest` runs the same application as its own process group on its own port for the
node agents' websockets (`make run` points the agents there; chart `portal.ingest`): a page
never queues behind a frame.

Prometheus (issue #33): with several processes `prometheus_client` needs its multiprocess mode;
when `PROMETHEUS_MULTIPROC_DIR` is set the server empties that folder before the processes
start (files of a previous run would add dead processes' counts), and each role should have
its own folder.
"""

from __future__ import annotations

import argparse
import copy
import os
import shutil
from pathlib import Path

APP = "portal.asgi:application"
ROLES = ("pages", "ingest")


def cgroup_cpus(path: Path = Path("/sys/fs/cgroup/cpu.max")) -> int | None:
    """The container's CPU limit rounded up (cgroup v2 `cpu.max`: "quota period"), or None."""
    try:
        quota, period = path.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return max(1, -(-int(quota) // int(period)))


def default_processes() -> int:
    """TRANCHE_PORTAL_PROCESSES, else one per core this process may use: the cores it may run
    on, fewer where its cgroup's CPU limit is lower (a pod limited to 2 CPUs on a 64-core node
    gets 2 processes, not 64)."""
    value = os.environ.get("TRANCHE_PORTAL_PROCESSES", "").strip()
    if value:
        count = int(value)
        if count < 1:
            raise SystemExit(f"TRANCHE_PORTAL_PROCESSES is {count}: give 1 or more processes")
        return count
    cores = len(os.sched_getaffinity(0))
    return max(1, min(cores, cgroup_cpus() or cores))


def argv(
    port: int, host: str = "127.0.0.1", processes: int | None = None, role: str = "pages"
) -> list[str]:
    """`python -m portal.serve ...` for a supervisor (sys.executable prepended by the caller)."""
    args = ["-m", "portal.serve", "--host", host, "--port", str(port), "--role", role]
    return [*args, "--processes", str(processes)] if processes else args


def reset_multiproc_dir() -> Path | None:
    """Empty PROMETHEUS_MULTIPROC_DIR (made if missing) before any process writes to it."""
    value = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "").strip()
    if not value:
        return None
    folder = Path(value)
    if folder.is_dir():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def log_config() -> dict:
    """uvicorn's own logging, with its line per refused websocket handshake rate-limited (a
    flood of bad handshakes on the ingest port wrote a line each)."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["filters"] = {"handshakes": {"()": "portal.core.ratelimit.RefusedHandshakes"}}
    config["handlers"]["default"]["filters"] = ["handshakes"]
    return config


def uvicorn_options(args: argparse.Namespace) -> dict:
    """What uvicorn.run gets: the same in development and production (only the env differs)."""
    return {
        "host": args.host,
        "port": args.port,
        "workers": args.processes,
        "lifespan": "off",  # Django's ASGI handler speaks no lifespan protocol
        "http": "httptools",
        "ws": "websockets-sansio",  # the websockets package's current API (17.x)
        "access_log": False,  # one log line per request would cost more than /healthz itself
        "log_config": log_config(),
        # Never: uvicorn would believe X-Forwarded-For from any listed proxy as the client. The
        # portal reads the header itself, trusting exactly TRANCHE_TRUSTED_PROXY_HOPS entries
        # (portal/core/client_address.py).
        "proxy_headers": False,
        "timeout_graceful_shutdown": 10,
        "ws_ping_interval": 20.0,
        "ws_ping_timeout": 20.0,
    }


def main(argv_: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m portal.serve", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("TRANCHE_PORT", "8000")))
    parser.add_argument("--processes", type=int, default=None, help="default: one per core")
    parser.add_argument("--role", choices=ROLES, default="pages")
    args = parser.parse_args(argv_)
    args.processes = args.processes or default_processes()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ["TRANCHE_PORTAL_ROLE"] = args.role
    reset_multiproc_dir()
    import uvicorn

    uvicorn.run(APP, **uvicorn_options(args))


if __name__ == "__main__":
    main()
