"""Start, stop and inspect the local control plane (etcd, apiserver, controllers, kwok).

`up()` is idempotent: it builds if needed, reuses a healthy running cluster,
otherwise starts each component in order and waits for its health endpoint.
If a component does not become healthy in time, everything this launcher
started is stopped and `StartError` names the component and its log file.
`down()` stops only processes whose pid file this launcher wrote and whose
command line still matches the binary it started, so it never touches another
cluster or a reused pid.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from deploy import supervisor
from deploy.devcluster.build import ensure_built
from deploy.devcluster.components import (
    SERVICE_IP,
    Component,
    Probe,
    all_components,
    client_kubeconfig,
    kubeconfig_text,
)
from deploy.devcluster.config import Settings, load_node_settings
from deploy.devcluster.node import build as node_build
from deploy.devcluster.node import run as node_run
from deploy.devcluster.node.render import node_paths
from deploy.devcluster.pki import ADMIN, CLIENTS, ensure_pki

# Seconds each group may take to become healthy on a loaded 2-core machine.
TIMEOUTS = {
    "etcd": 60.0,
    "kube-apiserver": 180.0,
    "kube-controller-manager": 120.0,
    "kube-scheduler": 120.0,
    "kwok": 120.0,
}
STOP_GRACE_SECONDS = 15.0


class StartError(RuntimeError):
    """A component did not become healthy; the message names it and its log."""


def _pid_file(settings: Settings, name: str) -> Path:
    return settings.run_dir / f"{name}.pid"


def running_pid(settings: Settings, component: Component) -> int | None:
    """The pid of `component` if this launcher started it and it still runs."""
    path = _pid_file(settings, component.name)
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if supervisor.is_ours(pid, component.argv[0]) else None


def _ssl_context(settings: Settings, probe: Probe) -> ssl.SSLContext:
    if probe.client is None:
        # Controller-manager and scheduler serve /healthz with a self-signed
        # certificate they generate; on loopback we only need liveness.
        return ssl._create_unverified_context()  # noqa: S323
    context = ssl.create_default_context(cafile=str(settings.pki_dir / "ca.crt"))
    pki = settings.pki_dir
    context.load_cert_chain(pki / f"{probe.client.stem}.crt", pki / f"{probe.client.stem}.key")
    return context


def probe_once(settings: Settings, probe: Probe) -> tuple[bool, str]:
    """Call the health endpoint once; return (healthy, short detail)."""
    context = _ssl_context(settings, probe) if probe.url.startswith("https") else None
    try:
        with urllib.request.urlopen(probe.url, timeout=5, context=context) as response:  # noqa: S310
            body = response.read(200).decode(errors="replace").strip()
            return response.status == 200, f"HTTP {response.status} {body}"
    except urllib.error.HTTPError as exc:
        return False, f"HTTP {exc.code} {exc.read(300).decode(errors='replace').strip()}"
    except (OSError, ssl.SSLError) as exc:
        return False, str(exc)


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log written)"


def _start(settings: Settings, component: Component) -> subprocess.Popen[bytes]:
    # Own session (deploy.supervisor.spawn): Ctrl-C in the caller's terminal does not reach
    # the cluster, and the processes outlive `python -m deploy.devcluster up`.
    proc = supervisor.spawn(
        component.argv, settings.log_path(component.name), {**os.environ, **component.env}
    )
    _pid_file(settings, component.name).write_text(f"{proc.pid}\n")
    return proc


def _wait_healthy(settings: Settings, component: Component, proc: subprocess.Popen[bytes]) -> None:
    timeout = TIMEOUTS[component.name]
    deadline = time.monotonic() + timeout
    detail = "not probed yet"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StartError(
                f"{component.name} exited with code {proc.returncode} while starting; "
                f"log: {settings.log_path(component.name)}\n"
                f"{_log_tail(settings.log_path(component.name))}"
            )
        healthy, detail = probe_once(settings, component.probe)
        if healthy:
            return
        time.sleep(0.5)
    raise StartError(
        f"{component.name} not healthy after {timeout:.0f}s ({component.probe.url}: {detail}); "
        f"log: {settings.log_path(component.name)}\n{_log_tail(settings.log_path(component.name))}"
    )


def _write_configs(settings: Settings) -> None:
    for folder in (settings.state_dir, settings.log_dir, settings.run_dir):
        folder.mkdir(parents=True, exist_ok=True)
    (settings.run_dir / "kwok-home").mkdir(exist_ok=True)
    ensure_pki(settings.pki_dir, SERVICE_IP)
    for client in CLIENTS:
        path = client_kubeconfig(settings, client)
        path.write_text(kubeconfig_text(settings, client))
        path.chmod(0o600)
    # kwok's stages come from the kwok code that was built (see k8s/main.go).
    stages = subprocess.run(
        [str(settings.kube_binary), "kwok-stages"], check=True, capture_output=True, text=True
    ).stdout
    (settings.run_dir / "kwok.yaml").write_text(stages)


def is_healthy(settings: Settings) -> bool:
    """True when every component and real node runs (started by us) and answers its probe."""
    for component in all_components(settings):
        if running_pid(settings, component) is None:
            return False
        if not probe_once(settings, component.probe)[0]:
            return False
    if not settings.real_nodes:
        return True
    nodes = load_node_settings()
    return all(
        node_run.running(settings, node_paths(settings, nodes, i))
        for i in range(settings.real_nodes)
    )


def node_images(settings: Settings) -> list[Path]:
    """OCI archives every real node's containerd imports: the pause image and the sample
    tenant image (built here when missing; skipped with a note before `make native`)."""
    from deploy.images import sample

    archives = [node_build.pause_archive(settings)]
    try:
        archives.append(sample.build(settings.state_dir / "images"))
    except sample.SampleBuildError as exc:
        print(f"[up] sample image skipped: {exc}", flush=True)
    return archives


def _start_nodes(settings: Settings, started_at: float) -> None:
    if not settings.real_nodes:
        return
    nodes = load_node_settings()
    images = node_images(settings)
    for i in range(settings.real_nodes):
        node = node_run.start(settings, nodes, i, images)
        print(
            f"[up] real node {node.name} ready ({time.monotonic() - started_at:.1f}s)", flush=True
        )


def refresh_node_images(settings: Settings) -> None:
    """Import the current images into running nodes (a rebuilt sample image, say)."""
    if settings.real_nodes:
        nodes = load_node_settings()
        images = node_images(settings)
        for i in range(settings.real_nodes):
            node_run.import_images(settings, node_paths(settings, nodes, i), images)


def _stop_nodes(settings: Settings, quiet: bool) -> None:
    if not settings.real_nodes:
        return
    nodes = load_node_settings()
    for i in reversed(range(settings.real_nodes)):
        node_run.stop(settings, node_paths(settings, nodes, i), quiet=quiet)


@contextlib.contextmanager
def _state_lock(settings: Settings) -> Iterator[None]:
    """One launcher at a time per state folder (several test sessions may share it)."""
    settings.run_dir.mkdir(parents=True, exist_ok=True)
    with (settings.run_dir / ".lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def up(settings: Settings, fresh: bool = False) -> Path:
    """Start the cluster if it is not already healthy; return the admin kubeconfig path.

    `fresh` wipes the etcd data first so the cluster starts empty. A cluster
    started here belongs to the caller: test sessions leave it running.
    """
    ensure_built(settings)
    with _state_lock(settings):
        _owner_file(settings).unlink(missing_ok=True)
        return _up(settings, fresh)


def _up(settings: Settings, fresh: bool) -> Path:
    if not fresh and is_healthy(settings):
        refresh_node_images(settings)
        print(f"[up] already running; kubeconfig: {settings.kubeconfig}", flush=True)
        return settings.kubeconfig
    _down(settings, quiet=True)  # clear half-started leftovers before starting again
    if fresh and settings.etcd_data_dir.exists():
        shutil.rmtree(settings.etcd_data_dir)
    _write_configs(settings)
    started_at = time.monotonic()
    components = all_components(settings)
    try:
        for component in components:
            proc = _start(settings, component)
            _wait_healthy(settings, component, proc)
            print(
                f"[up] {component.name} healthy ({time.monotonic() - started_at:.1f}s)", flush=True
            )
        _start_nodes(settings, started_at)
    except BaseException:
        # Whatever interrupts the start (a failed probe, Ctrl-C, a test
        # timeout), leave no half-started cluster behind.
        _down(settings, quiet=True)
        raise
    print(f"[up] cluster ready in {time.monotonic() - started_at:.1f}s", flush=True)
    print(f"[up] kubeconfig: {settings.kubeconfig}", flush=True)
    return settings.kubeconfig


def _stop(settings: Settings, component: Component, quiet: bool) -> None:
    pid = running_pid(settings, component)
    pid_file = _pid_file(settings, component.name)
    if pid is not None:
        supervisor.stop_pid(pid, component.argv[0], STOP_GRACE_SECONDS)
        if not quiet:
            print(f"[down] stopped {component.name} (pid {pid})", flush=True)
    pid_file.unlink(missing_ok=True)


def component(settings: Settings, name: str) -> Component:
    """The component called `name` (one of `components.COMPONENTS`)."""
    for candidate in all_components(settings):
        if candidate.name == name:
            return candidate
    names = ", ".join(c.name for c in all_components(settings))
    raise ValueError(f"no control-plane component {name!r}; known: {names}")


def stop_component(settings: Settings, name: str) -> bool:
    """Stop one component this launcher started (SIGTERM, then SIGKILL after a grace period).

    Only a process whose pid file we wrote and whose command line is still our binary is
    signalled. Returns True if it was running. The rest of the cluster keeps running.
    """
    target = component(settings, name)
    with _state_lock(settings):
        was_running = running_pid(settings, target) is not None
        _stop(settings, target, quiet=True)
    return was_running


def start_component(settings: Settings, name: str) -> int:
    """Start one stopped component and wait for its health endpoint; return its pid.

    A component that already runs (ours, per pid file and command line) is left alone. On a
    failed start the process is stopped again and `StartError` names the component and its log.
    """
    target = component(settings, name)
    with _state_lock(settings):
        pid = running_pid(settings, target)
        if pid is not None:
            return pid
        proc = _start(settings, target)
        try:
            _wait_healthy(settings, target, proc)
        except BaseException:
            _stop(settings, target, quiet=True)
            raise
        return proc.pid


def down(settings: Settings, purge: bool = False, quiet: bool = False) -> None:
    """Stop every component this launcher started, newest first; `purge` also deletes state."""
    with _state_lock(settings):
        _down(settings, quiet)
        for lease in _lease_dir(settings).glob("*"):
            lease.unlink()
    if purge and settings.state_dir.exists():
        shutil.rmtree(settings.state_dir)
        if not quiet:
            print(f"[down] removed {settings.state_dir}", flush=True)


def _down(settings: Settings, quiet: bool) -> None:
    _stop_nodes(settings, quiet)
    for component in reversed(all_components(settings)):
        _stop(settings, component, quiet)


# Test sessions share one cluster through leases: each live session holds a
# file named after its pid; the last one out stops the cluster, but only if a
# session (not a person running `up`) started it.


def _lease_dir(settings: Settings) -> Path:
    return settings.run_dir / "leases"


def _owner_file(settings: Settings) -> Path:
    return settings.run_dir / "started-by-session"


def _live_leases(settings: Settings) -> list[Path]:
    live = []
    for lease in _lease_dir(settings).glob("*"):
        if lease.name.isdigit() and Path(f"/proc/{lease.name}").exists():
            live.append(lease)
        else:
            lease.unlink(missing_ok=True)  # the session died without releasing
    return live


def acquire(settings: Settings) -> bool:
    """Use the running cluster, or start a fresh one; return True if this call started it."""
    ensure_built(settings)
    with _state_lock(settings):
        started = not is_healthy(settings)
        if started:
            _up(settings, fresh=True)
            _owner_file(settings).write_text(f"{os.getpid()}\n")
        else:
            refresh_node_images(settings)
        _lease_dir(settings).mkdir(exist_ok=True)
        (_lease_dir(settings) / str(os.getpid())).touch()
        return started


def release(settings: Settings) -> bool:
    """Drop this process's lease; stop the cluster if it was the last session's. True if stopped."""
    with _state_lock(settings):
        (_lease_dir(settings) / str(os.getpid())).unlink(missing_ok=True)
        if _live_leases(settings) or not _owner_file(settings).exists():
            return False
        _down(settings, quiet=True)
        _owner_file(settings).unlink(missing_ok=True)
        return True


def status(settings: Settings) -> dict[str, str]:
    """One line of state per component (pid and probe result)."""
    result = {}
    for component in all_components(settings):
        pid = running_pid(settings, component)
        if pid is None:
            result[component.name] = "stopped"
            continue
        healthy, detail = probe_once(settings, component.probe)
        result[component.name] = f"pid {pid}, {'healthy' if healthy else 'unhealthy'}: {detail}"
    return result


__all__ = [
    "ADMIN",
    "StartError",
    "acquire",
    "component",
    "down",
    "is_healthy",
    "release",
    "start_component",
    "status",
    "stop_component",
    "up",
]
