"""The platform processes of `make run`, started for a benchmark: a private control plane, the
portal, a worker, beat and the watcher, each with its log, and what each process costs.

`Stack` owns everything it starts and stops all of it (`close()`), so a benchmark leaves nothing
running: the control plane lives in a temporary state folder on its own loopback ports and is
purged at the end; the portal processes use a database, Celery queue and channel prefix of
their own (PostgreSQL and Redis are the project's, started if they were not running, stopped
again if the bench started them).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TICKS = os.sysconf("SC_CLK_TCK")
# The controller manager's and scheduler's client rate: their defaults (20, 50 QPS) pace 4,000
# pods and claims at ~20/s, which would measure the rate limiter instead of the allocator.
CLIENT_QPS = 200


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class ProcStats:
    """CPU seconds used so far and peak resident memory (VmHWM) of one process."""

    cpu_seconds: float
    rss_mib: float
    peak_rss_mib: float


def proc_stats(pid: int) -> ProcStats:
    """utime+stime of the process itself (not its children), its RSS and peak RSS."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICKS
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    kib = lambda key: int(status.get(key, "0 kB").split()[0])  # noqa: E731
    return ProcStats(round(cpu, 2), round(kib("VmRSS") / 1024, 1), round(kib("VmHWM") / 1024, 1))


def _ports_base() -> int:
    """Seven consecutive free loopback ports below the ephemeral range for the control plane."""
    for _ in range(50):
        base = 22000 + secrets.randbelow(800) * 10
        taken = False
        for port in range(base, base + 7):
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    taken = True
                    break
        if not taken:
            return base
    raise RuntimeError("no free block of 7 loopback ports for the bench's control plane")


@dataclass
class Stack:
    """Start with `Stack.start()`; `close()` stops and removes everything it made."""

    db_name: str
    state: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tranche-scale-")))
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    port: int = 0
    ingest_port: int = 0  # the node agents' process group (portal/serve.py --role ingest)
    secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(48))
    queue: str = ""
    cluster_settings: object = None
    services_started: bool = False

    # -- environment -----------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """Production settings, as the chart runs the platform (bench/scalekit/production.py);
        TRANCHE_BENCH_DEBUG=1 runs it in development mode instead."""
        from bench.scalekit.production import production_env

        base = dict(os.environ)
        if os.environ.get("TRANCHE_BENCH_DEBUG") != "1":
            base = production_env(base)
            base["TRANCHE_SECRET_KEY"] = self.secret_key
        return {
            **base,
            "PYTHONPATH": str(ROOT),
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "TRANCHE_DB_NAME": self.db_name,
            "TRANCHE_CELERY_QUEUE": self.queue,
            "TRANCHE_CHANNELS_PREFIX": self.queue,
            "TRANCHE_PORT": str(self.port),
            "KUBECONFIG": str(self.kubeconfig),
        }

    @property
    def kubeconfig(self) -> Path:
        return self.cluster_settings.kubeconfig

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ingest_url(self) -> str:
        return f"http://127.0.0.1:{self.ingest_port}"

    # -- lifecycle -------------------------------------------------------------------------
    def start_cluster(self) -> None:
        """A fresh control plane of our own (binaries from the shared build cache)."""
        from deploy.devcluster import build, launcher
        from deploy.devcluster.config import Ports, Settings, load_settings

        base = _ports_base()
        shared = load_settings()
        self.cluster_settings = Settings(
            cache_dir=shared.cache_dir,
            state_dir=self.state / "cluster",
            ports=Ports(base, base + 1, base + 2, base + 3, base + 4, base + 5),
            client_qps=CLIENT_QPS,
        )
        build.ensure_built(self.cluster_settings)
        launcher.up(self.cluster_settings, fresh=True)

    def start_services(self) -> None:
        """PostgreSQL and Redis of the project (started only if down), and our database."""
        from deploy.local import services

        self.services_started = not (
            services.port_open(int(os.environ.get("TRANCHE_DB_PORT", "15432")))
            and services.port_open(int(os.environ.get("TRANCHE_REDIS_PORT", "16379")))
        )
        for line in services.up():
            print(line, flush=True)

    def configure(self) -> None:
        """Our port, queue, channel prefix and cluster in this process's environment: call it
        before django.setup(), so what this process sends reaches our worker."""
        self.port = self.port or free_port()
        self.queue = self.queue or f"tranche-scale-{secrets.token_hex(3)}"
        os.environ.update({k: v for k, v in self.env().items() if k.startswith("TRANCHE_")})
        os.environ["KUBECONFIG"] = str(self.kubeconfig)

    def start_platform(self) -> None:
        """Portal, worker, beat and watcher with `make run`'s argv and pool sizes."""
        from deploy.local.platform import POOL_SIZES, processes

        self.configure()
        if os.environ.get("TRANCHE_BENCH_DEBUG") != "1":
            from bench.scalekit.production import collect_static

            collect_static(self.env())
        argvs = processes()
        argvs["portal"][argvs["portal"].index("--port") + 1] = str(self.port)
        self.ingest_port = self.ingest_port or free_port()
        argvs["ingest"][argvs["ingest"].index("--port") + 1] = str(self.ingest_port)
        argvs["beat"][argvs["beat"].index("-s") + 1] = str(self.state / "celerybeat-schedule")
        for name, argv in argvs.items():
            self.spawn(name, argv, {"TRANCHE_DB_POOL_MAX_SIZE": str(POOL_SIZES[name])})
        # Production figures (issue #35): TRANCHE_DEBUG unset, as the chart runs it.
        self.wait_portal()

    def spawn(self, name: str, argv: list[str], extra: dict[str, str] | None = None):
        log = self.state / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        self.procs[name] = subprocess.Popen(
            argv, cwd=ROOT, env={**self.env(), **(extra or {})},
            stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        return self.procs[name]

    def wait_portal(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.procs["portal"].poll() is not None:
                raise RuntimeError(f"the portal exited; see {self.state}/logs/portal.log")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as resp,  # noqa: S310
            ):
                if resp.status == 200:
                    return
            time.sleep(0.25)
        raise RuntimeError(f"the portal did not answer {self.url}/healthz within {timeout:.0f}s")

    def stats(self, name: str) -> ProcStats:
        return proc_stats(self.procs[name].pid)

    def stop(self, name: str, grace: float = 10) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def close(self, keep_logs: Path | None = None) -> None:
        """Stop every process, the control plane and (if we started them) PostgreSQL/Redis.
        A second Ctrl-C must not leave half of it running: SIGINT is ignored from here on."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for name in list(self.procs):
            self.stop(name)
        if self.cluster_settings is not None:
            from deploy.devcluster import launcher

            launcher.down(self.cluster_settings, purge=True, quiet=True)
        if keep_logs is not None and (self.state / "logs").is_dir():
            shutil.copytree(self.state / "logs", keep_logs, dirs_exist_ok=True)
        if self.services_started:
            from deploy.local import services

            services.down()
        shutil.rmtree(self.state, ignore_errors=True)


def python() -> str:
    return sys.executable
