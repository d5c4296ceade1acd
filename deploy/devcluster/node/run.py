"""Start, stop and clean one real node: containerd, then the kubelet; the reverse on stop.

`start(settings, nodes, i)` writes the node's configs and certificate, creates its cgroup root,
starts containerd (importing the pause image and the sample tenant image under their fully
qualified names) and then the kubelet, and waits for the kubelet's health endpoint. `stop`
stops the kubelet, kills every process in the node's cgroup root, stops the runc shims and
containerd, unmounts what they left under the node's folder (overlay rootfs, netns, tmpfs
volumes), deletes the bridge and removes the cgroups. `leftovers` lists whatever of that is
still there: `make stop` must leave it empty.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from deploy import supervisor
from deploy.devcluster.components import kubeconfig_text
from deploy.devcluster.config import NodeSettings, Settings
from deploy.devcluster.node import build
from deploy.devcluster.node.render import (
    NodePaths,
    cni_network,
    containerd_config,
    kubelet_argv,
    kubelet_config,
    node_paths,
)
from deploy.devcluster.pki import ClientIdentity, ensure_node_cert

CGROUP_FS = Path("/sys/fs/cgroup")
CONTAINERD_TIMEOUT = 60.0
KUBELET_TIMEOUT = 120.0
MNT_DETACH = 2


class NodeError(RuntimeError):
    """A real node did not start; the message names the process and its log."""


def _pid_file(settings: Settings, node: NodePaths, what: str) -> Path:
    return settings.run_dir / f"{what}-{node.name}.pid"


def _log(settings: Settings, node: NodePaths, what: str) -> Path:
    return settings.log_path(f"{what}-{node.name}")


def _ctr(settings: Settings, node: NodePaths, *args: str) -> subprocess.CompletedProcess[str]:
    ctr = build.containerd_dir(settings) / "ctr"
    argv = [str(ctr), "--address", str(node.socket.resolve()), "--namespace", "k8s.io", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def cgroup_dirs(node: NodePaths) -> list[Path]:
    """The node's cgroup root in each mounted hierarchy (v1: one per controller; v2: one)."""
    rel = node.cgroup_root.lstrip("/")
    if (CGROUP_FS / "cgroup.controllers").exists():
        return [CGROUP_FS / rel]
    hierarchies = sorted(p for p in CGROUP_FS.iterdir() if p.is_dir() and not p.is_symlink())
    return [h / rel for h in hierarchies if (h / "cgroup.procs").exists()]


def _write_configs(settings: Settings, node: NodePaths, pause_image: str) -> None:
    for folder in (node.root, node.cdi_dir, node.cni_conf_dir, node.pod_logs, node.agent_dir):
        folder.mkdir(parents=True, exist_ok=True)
    ensure_node_cert(settings.pki_dir, node.name, node.ip)
    identity = ClientIdentity(f"node-{node.name}", f"system:node:{node.name}", ("system:nodes",))
    node.kubeconfig.write_text(kubeconfig_text(settings, identity))
    node.kubeconfig.chmod(0o600)
    node.file("kubelet.yaml").write_text(json.dumps(kubelet_config(settings, node), indent=2))
    node.file("containerd.toml").write_text(
        containerd_config(node, build.RUNC, build.CNI_BIN_DIR, pause_image)
    )
    (node.cni_conf_dir / "10-tranche.conflist").write_text(json.dumps(cni_network(node)))
    for folder in cgroup_dirs(node):
        folder.mkdir(exist_ok=True)


def _wait(predicate, timeout: float, what: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise NodeError(f"{what} exited with code {proc.returncode}; log: {log}\n"
                            f"{_tail(log)}")  # fmt: skip
        if predicate():
            return
        time.sleep(0.2)
    raise NodeError(f"{what} not ready after {timeout:.0f}s; log: {log}\n{_tail(log)}")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log written)"


def _healthz(node: NodePaths) -> bool:
    try:
        url = f"http://127.0.0.1:{node.healthz_port}/healthz"
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def running(settings: Settings, node: NodePaths) -> bool:
    """containerd and the kubelet of `node` run (started by us)."""
    folder = build.containerd_dir(settings)
    kubelet = str(settings.bin_dir / "kubelet")
    return bool(
        supervisor.read_pid(_pid_file(settings, node, "containerd"), str(folder / "containerd"))
        and supervisor.read_pid(_pid_file(settings, node, "kubelet"), kubelet)
    )


def start(settings: Settings, nodes: NodeSettings, index: int, images: list[Path]) -> NodePaths:
    """Start node `index` (idempotent: a running node is kept); images: OCI archives to import."""
    node = node_paths(settings, nodes, index)
    if running(settings, node):
        return node
    stop(settings, node, quiet=True)  # half-started leftovers first
    build.check_host_tools()
    _write_configs(settings, node, build.PAUSE_IMAGE)
    folder = build.containerd_dir(settings)
    env = {**os.environ, "PATH": f"{folder}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    argv = [str(folder / "containerd"), "--config", str(node.file("containerd.toml"))]
    log = _log(settings, node, "containerd")
    proc = supervisor.spawn(argv, log, env)
    _pid_file(settings, node, "containerd").write_text(f"{proc.pid}\n")
    _wait(lambda: _ctr(settings, node, "version").returncode == 0, CONTAINERD_TIMEOUT,
          f"containerd of {node.name}", proc, log)  # fmt: skip
    import_images(settings, node, images)
    argv = kubelet_argv(settings, node)
    log = _log(settings, node, "kubelet")
    proc = supervisor.spawn(argv, log, env)
    _pid_file(settings, node, "kubelet").write_text(f"{proc.pid}\n")
    _wait(lambda: _healthz(node), KUBELET_TIMEOUT, f"kubelet of {node.name}", proc, log)
    return node


def import_images(settings: Settings, node: NodePaths, images: list[Path]) -> None:
    """Import OCI archives into the node's containerd (an unchanged image is a no-op), so a
    rebuilt sample image reaches a node that kept running."""
    for archive in images:
        done = _ctr(settings, node, "images", "import", "--no-unpack", str(archive))
        if done.returncode != 0:
            raise NodeError(f"{node.name}: ctr images import {archive} failed: {done.stderr}")


def _procs_in(folder: Path) -> list[int]:
    # os.walk skips a directory the kernel removes mid-walk (Path.rglob raised
    # FileNotFoundError from scandir when a pod's cgroup went while the node stopped)
    pids = []
    for root, _dirs, files in os.walk(folder):
        if "cgroup.procs" in files:
            with contextlib.suppress(OSError):
                pids += [int(p) for p in (Path(root) / "cgroup.procs").read_text().split()]
    return pids


def _shims(settings: Settings, node: NodePaths) -> list[int]:
    """The runc shims of this node's containerd (they leave its process tree by design)."""
    shim = str(build.containerd_dir(settings) / "containerd-shim-runc-v2")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            words = (entry / "cmdline").read_bytes().split(b"\0")
            if words[0].decode(errors="replace") == shim and str(node.socket).encode() in words:
                found.append(int(entry.name))
    return found


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root.resolve()) + "/"
    points = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(prefix):
                points.append(point)
    return points


def _unmount_all(root: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    for _ in range(5):  # stacked mounts: repeat until nothing is left
        points = _mounts_under(root)
        if not points:
            return
        for point in sorted(set(points), key=len, reverse=True):
            libc.umount2(os.fsencode(point), MNT_DETACH)


def _bridge_exists(node: NodePaths) -> bool:
    return Path(f"/sys/class/net/{node.bridge}").exists()


def _container_log_links(node: NodePaths) -> list[Path]:
    """kubelet links each container's log into /var/log/containers (a fixed path)."""
    links = []
    folder = Path("/var/log/containers")
    prefix = str(node.pod_logs) + "/"
    with contextlib.suppress(OSError):
        for link in folder.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(prefix):
                    links.append(link)
    return links


def _kill_containers(settings: Settings, node: NodePaths) -> None:
    """SIGKILL every process in the node's cgroups, then its runc shims."""
    for _ in range(3):  # containers first: their shims then exit on their own
        pids = [p for d in cgroup_dirs(node) if d.exists() for p in _procs_in(d)]
        if not pids:
            break
        for pid in set(pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        supervisor.wait_until(
            lambda: not any(_procs_in(d) for d in cgroup_dirs(node) if d.exists()), 10.0
        )
    for pid in _shims(settings, node):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _remove_cgroups(node: NodePaths) -> None:
    for top in cgroup_dirs(node):
        if not top.exists():
            continue
        # os.walk, not Path.rglob: the kernel removes a container's cgroup while we walk, and
        # rglob raised FileNotFoundError for a folder gone between listing and opening it.
        subs = [Path(d) for d, _, _ in os.walk(top, topdown=False) if Path(d) != top]
        for sub in subs:  # deepest first (bottom-up walk)
            with contextlib.suppress(OSError):
                sub.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def stop(settings: Settings, node: NodePaths, quiet: bool = False) -> None:
    """Stop the node and remove its containers, mounts, netns, bridge and cgroups."""
    folder = build.containerd_dir(settings)
    kubelet = supervisor.read_pid(
        _pid_file(settings, node, "kubelet"), str(settings.bin_dir / "kubelet")
    )
    if kubelet:
        supervisor.stop_pid(kubelet, str(settings.bin_dir / "kubelet"), 15.0)
    _kill_containers(settings, node)
    containerd = supervisor.read_pid(
        _pid_file(settings, node, "containerd"), str(folder / "containerd")
    )
    if containerd:
        supervisor.stop_pid(containerd, str(folder / "containerd"), 15.0)
    for what in ("kubelet", "containerd"):
        _pid_file(settings, node, what).unlink(missing_ok=True)
    _unmount_all(node.root)
    if _bridge_exists(node):
        subprocess.run(["ip", "link", "delete", node.bridge], capture_output=True, check=False)
    for link in _container_log_links(node):
        link.unlink(missing_ok=True)
    _remove_cgroups(node)
    if not quiet:
        print(f"[down] stopped real node {node.name}", flush=True)


def leftovers(settings: Settings, node: NodePaths) -> list[str]:
    """What of the node is still on the machine: processes, mounts, cgroups, bridge, links."""
    found = []
    binaries = {"kubelet": settings.bin_dir / "kubelet",
                "containerd": build.containerd_dir(settings) / "containerd"}  # fmt: skip
    for what, binary in binaries.items():
        pid = supervisor.read_pid(_pid_file(settings, node, what), str(binary))
        if pid:
            found.append(f"process {what} {pid}")
    found += [f"shim {pid}" for pid in _shims(settings, node)]
    found += [f"mount {point}" for point in _mounts_under(node.root)]
    found += [f"cgroup {d}" for d in cgroup_dirs(node) if d.exists()]
    netns = node.containerd_state / "netns"
    if netns.exists():
        found += [f"netns {p}" for p in netns.iterdir()]
    if _bridge_exists(node):
        found.append(f"bridge {node.bridge}")
    found += [f"log link {link}" for link in _container_log_links(node)]
    return found
