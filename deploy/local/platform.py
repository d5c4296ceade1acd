"""The local platform behind `make run`: services, database, demo data and long-running processes.

The long-running processes (portal, worker, beat, watcher, demo node agents) run under one
detached supervisor (`deploy.supervisor`: own session, pid file, logs under `.state/logs/`) that
restarts any of them within 5 s of a crash, so `make run` returns once the portal answers and
`make stop` ends them all. A second `make run` only starts what is not running; `make status`
shows each process's pid and restarts.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from deploy import supervisor
from deploy.local import agents, services
from deploy.local.celery_worker import worker_argv
from portal import serve

REPO = services.REPO
VENV_BIN = Path(sys.executable).parent


class PlatformError(RuntimeError):
    """A platform step failed; the message names the step and its log."""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TRANCHE_DEBUG", "1")
    env.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    env["PYTHONPATH"] = str(REPO)
    env.update(sample_registry_env(env))
    return env


def sample_registry(env: dict[str, str] | None = None) -> str:
    """host:port of the registry serving pre-flight's sample images: loopback, port
    TRANCHE_SAMPLE_REGISTRY_PORT, else the portal's port + 5 (so each worktree has its own)."""
    env = os.environ if env is None else env
    port = env.get("TRANCHE_SAMPLE_REGISTRY_PORT") or str(int(env.get("TRANCHE_PORT", "8000")) + 5)
    return f"127.0.0.1:{port}"


def sample_registry_env(env: dict[str, str]) -> dict[str, str]:
    """Pre-flight may read the sample registry (plain HTTP, loopback: exactly that host:port,
    added to what the operator lists) and the pre-flight page names its images as examples."""
    from deploy.ociregistry.samples import SAMPLES

    host = sample_registry(env)

    def listed(name: str) -> str:
        items = [x for x in env.get(name, "").split(",") if x.strip()]
        return ",".join(items if host in items else [*items, host])

    return {
        "TRANCHE_PREFLIGHT_PLAIN_HTTP_REGISTRIES": listed(
            "TRANCHE_PREFLIGHT_PLAIN_HTTP_REGISTRIES"
        ),
        "TRANCHE_PREFLIGHT_ALLOWED_REGISTRIES": listed("TRANCHE_PREFLIGHT_ALLOWED_REGISTRIES"),
        "TRANCHE_PREFLIGHT_SAMPLE_IMAGES": ",".join(s.reference(host) for s in SAMPLES),
    }


# Database connections each process's pool may hold (TRANCHE_DB_POOL_MAX_SIZE; the formula is in
# portal/settings.py). Worker: per prefork child and the parent, so 3 x 2 with concurrency 2.
# The pre-flight worker's threads share one pool: each holds a connection only around its two
# short cache queries, never across a registry's network I/O (portal/preflight/scanning.py).
# Portal: per process (`portal.serve`, one per core). Its sync views share one thread, but each
# request in flight holds its own connection until its response is sent (Django's connections
# are per request context under ASGI), and a view that waits for one stalls that thread for
# every request of the process: 8 per process gave 503 "busy" at 50 clients (issue #35's bench).
POOL_SIZES = {"portal": 20, "ingest": 8, "worker": 2, "beat": 2, "watcher": 2, "preflight": 2}
# How long each waits for a pooled connection (TRANCHE_DB_POOL_TIMEOUT): a page request ~1 s
# (the 503 page comes at once during an outage), the others retry anyway and may wait longer.
POOL_WAITS = {
    "portal": 1.0,
    "ingest": 1.0,
    "worker": 10.0,
    "beat": 10.0,
    "watcher": 10.0,
    "preflight": 10.0,
}


def metrics_ports() -> dict[str, int]:
    """The controller's /metrics ports (controller/metrics.py): the worker's and the watcher's,
    7 and 8 above the portal's port unless TRANCHE_CONTROLLER_METRICS_PORT /
    TRANCHE_WATCHER_METRICS_PORT say otherwise (each worktree's stack its own)."""
    env = os.environ
    return {
        "worker": int(env.get("TRANCHE_CONTROLLER_METRICS_PORT") or _port() + 7),
        "watcher": int(env.get("TRANCHE_WATCHER_METRICS_PORT") or _port() + 8),
    }


def role_env(name: str) -> dict[str, str]:
    """The environment one supervised process gets on top of the platform's. The portal's
    process groups each get their own prometheus_client multiprocess folder (emptied by
    `portal.serve` at start), the prefork worker one its children share."""
    env = {
        "TRANCHE_DB_POOL_MAX_SIZE": str(POOL_SIZES[name]),
        "TRANCHE_DB_POOL_TIMEOUT": str(POOL_WAITS[name]),
    }
    ports = metrics_ports()
    if name == "worker":  # prefork: the children's samples meet in one folder (multiprocess)
        env["TRANCHE_CONTROLLER_METRICS_PORT"] = str(ports["worker"])
        env["PROMETHEUS_MULTIPROC_DIR"] = str(services.layout().state / "metrics" / "worker")
    elif name == "preflight":  # imports the controller's tasks too, serves no metrics
        env["TRANCHE_CONTROLLER_METRICS_PORT"] = "0"
    elif name == "watcher":
        env["TRANCHE_WATCHER_METRICS_PORT"] = str(ports["watcher"])
    elif name in PORTAL_GROUPS:
        folder = services.layout().state / "run" / f"prometheus-{name}"
        env["PROMETHEUS_MULTIPROC_DIR"] = str(folder)
    return env


def _fresh_metrics_dir(state: Path, running: dict) -> None:
    """The worker's multiprocess folder, emptied when the worker is not running (samples of
    earlier runs' processes would be summed into this one's)."""
    folder = state / "metrics" / "worker"
    if "worker" not in running and folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)


def metrics_lines(url: str, agent_argv: dict[str, list[str]]) -> list[str]:
    """What `make run` prints: where each process serves /metrics (docs/metrics.md)."""
    ports = metrics_ports()
    lines = [
        f"Metrics: portal {url}/metrics, controller worker http://127.0.0.1:{ports['worker']}"
        f"/metrics, watcher http://127.0.0.1:{ports['watcher']}/metrics"
    ]
    for name, argv in agent_argv.items():
        if "--metrics-port" in argv and argv[argv.index("--metrics-port") + 1] != "0":
            port = argv[argv.index("--metrics-port") + 1]
            lines.append(f"Metrics: {name} http://127.0.0.1:{port}/metrics")
    return lines


# The portal's process groups: pages (one process per core) and the node agents' ingest.
PORTAL_GROUPS = ("portal", "ingest")
INGEST_PROCESSES = 1


def portal_processes() -> int:
    return serve.default_processes()


WORKER_CONCURRENCY = 2
PREFLIGHT_THREADS = 8  # image scans wait on registries; threads, not processes


def pool_total() -> int:
    """The most PostgreSQL connections the supervised processes can hold together."""
    return (
        portal_processes() * POOL_SIZES["portal"]
        + INGEST_PROCESSES * POOL_SIZES["ingest"]
        + (WORKER_CONCURRENCY + 1) * POOL_SIZES["worker"]
        + POOL_SIZES["beat"]
        + POOL_SIZES["watcher"]
        + POOL_SIZES["preflight"]
    )


def _paths() -> tuple[Path, Path, Path]:
    run = services.layout().state / "run"
    return run / "supervisor-spec.json", run / "supervisor-status.json", run / "supervisor.pid"


def _port() -> int:
    return int(os.environ.get("TRANCHE_PORT", "8000"))


def ingest_port(env: dict[str, str] | None = None) -> int:
    """The agents' ingest process group: TRANCHE_INGEST_PORT, else the portal's port + 2."""
    env = os.environ if env is None else env
    return int(env.get("TRANCHE_INGEST_PORT") or int(env.get("TRANCHE_PORT", "8000")) + 2)


def processes() -> dict[str, list[str]]:
    """Name -> argv of every long-running process of the local platform."""
    state = services.layout().state
    return {
        # Pages and browsers' sockets: one process per core on one port (portal/serve.py).
        "portal": [sys.executable, *serve.argv(_port())],
        # The node agents' frames: the same application, its own processes and port, so a
        # page never waits behind the ingest (the demo agents are pointed here).
        "ingest": [
            sys.executable,
            *serve.argv(ingest_port(), processes=INGEST_PROCESSES, role="ingest"),
        ],
        "worker": worker_argv(
            os.environ.get("TRANCHE_CELERY_QUEUE", "tranche"),
            name="worker@%h",
            concurrency=WORKER_CONCURRENCY,
            celery=[str(VENV_BIN / "celery")],
        ),
        # Pre-flight's image scans: untrusted work on its own queue, so a tenant's silent
        # registry never delays a reconcile (docs/preflight.md).
        "preflight": worker_argv(
            os.environ.get("TRANCHE_PREFLIGHT_QUEUE", "tranche-preflight"),
            name="preflight@%h",
            concurrency=PREFLIGHT_THREADS,
            pool="threads",
            celery=[str(VENV_BIN / "celery")],
        ),
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


def samples_argv(state: Path) -> list[str]:
    """The sample registry of pre-flight's page (deploy/ociregistry/samples.py): `make run`
    only, not a platform process (tests that start the platform need no samples)."""
    return [
        sys.executable, "-m", "deploy.ociregistry", "samples",
        "--port", sample_registry().rsplit(":", 1)[1], "--state", str(state / "samples"),
    ]  # fmt: skip


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
    spec_path, status_path, pidfile = _paths()
    running = supervisor.read_status(status_path) if supervisor.read_pid(pidfile) else {}
    _fresh_metrics_dir(state, running)
    spec = {name: {"argv": argv, "env": role_env(name)} for name, argv in processes().items()}
    spec["samples"] = {"argv": samples_argv(state), "env": {}}
    demo = agents.commands(state, _env(), ingest_port(), skip=set(running), real_nodes=True)
    for name, argv in demo.items():
        spec[name] = {"argv": argv, "env": {}}
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(json.dumps(spec, indent=1))
    pid = supervisor.read_pid(pidfile)
    if pid:
        os.kill(pid, signal.SIGHUP)  # starts what the spec gained; running processes stay
    else:
        argv = [sys.executable, "-m", "deploy.supervisor", str(spec_path), str(status_path)]
        pid = supervisor.start_detached("supervisor", argv, state, _env())
    print(f"supervisor: pid {pid} (restarts crashed processes), logs in {state / 'logs'}")
    url = f"http://127.0.0.1:{_port()}"
    if not supervisor.wait_until(lambda: _portal_healthy(url), 60, 0.25):
        raise PlatformError(f"the portal did not answer {url}/healthz; see {state}/logs/portal.log")
    print(f"database connections: at most {pool_total()} (pools of each supervised process)")
    print(_samples_line())
    print(f"\nTranche portal: {url}/   (readiness: {url}/readyz, admin: {url}/admin/)")
    print(f"Tenants' kubeconfig: {url}/access/   (log in as a tenant, 'Download kubeconfig')")
    for line in _real_nodes():
        print(line)
    agent_argv = {n: spec[n]["argv"] for n in spec if n.startswith("agent")}
    for line in metrics_lines(url, agent_argv):
        print(line)
    print("Stop everything with: make stop")


def _samples_line() -> str:
    from deploy.ociregistry.samples import SAMPLES, served

    host = sample_registry()
    if not supervisor.wait_until(lambda: served(host), 60, 0.25):
        state = services.layout().state
        raise PlatformError(
            f"the sample registry {host} did not serve; see {state}/logs/samples.log"
        )
    names = ", ".join(s.name for s in SAMPLES)
    return f"pre-flight sample images on {host}/samples/ ({names}); the pre-flight page names them"


def _real_nodes() -> list[str]:
    """One line per real node of the dev cluster: where its pods run and its sample image."""
    if os.environ.get("KUBECONFIG"):
        return []
    from deploy.devcluster.config import load_node_settings, load_settings
    from deploy.devcluster.node.render import node_paths
    from deploy.images.sample import IMAGE

    settings, nodes = load_settings(), load_node_settings()
    return [
        f"Real node {p.name}: kubelet + containerd + runc, {agents.GPUS_PER_NODE} simulated "
        f"V100 (agent-{p.name}), pods see only their GPU; sample tenant image {IMAGE}"
        for p in (node_paths(settings, nodes, i) for i in range(settings.real_nodes))
    ]


def stop() -> None:
    state = services.layout().state
    names = list(supervisor.read_status(_paths()[1]))
    # The supervisor stops its children (each within STOP_GRACE_SECONDS) before it exits.
    if supervisor.stop_named("supervisor", state, timeout=3 * supervisor.STOP_GRACE_SECONDS):
        print(f"stopped: {', '.join(names) or 'supervisor'}")
    services.down()
    print("PostgreSQL and Redis stopped")
    if not os.environ.get("KUBECONFIG"):
        subprocess.run([sys.executable, "-m", "deploy.devcluster", "down"], cwd=REPO, check=False)


def status() -> None:
    _spec, status_path, pidfile = _paths()
    pid = supervisor.read_pid(pidfile)
    if not pid:
        print("supervisor: stopped (nothing runs; `make run` starts it)")
        return
    print(f"supervisor: running, pid {pid}")
    for name, st in supervisor.read_status(status_path).items():
        state = f"running, pid {st['pid']}" if st["pid"] else "restarting"
        exit_note = f", last exit code {st['last_exit']}" if st["last_exit"] is not None else ""
        print(f"{name}: {state}, restarts {st['restarts']}{exit_note} (since {st['since']})")
