"""The real nodes' NetworkPolicy enforcer: kube-router's firewall alone, from the Go module proxy.

The node's bridge CNI enforces no NetworkPolicy. kube-router (`--run-firewall` only: no BGP
router, no service proxy) turns the policies that select this cluster's pods into iptables
chains and ipsets in the host's filter table; the bridge hands pod-to-pod traffic to iptables
(`net.bridge.bridge-nf-call-iptables=1`), so the policies hold between pods of the bridge.
Why kube-router v2.1.0 and not another enforcer: docs/devcluster.md, "NetworkPolicy".

Those chains and sets are machine-wide and kube-router deletes every `KUBE-POD-FW-*` and
`KUBE-NWPLCY-*` chain it did not make itself, so two instances (two sessions' clusters on one
machine) would undo each other. `enforcing()` therefore runs one for as long as a block runs,
under a lock shared by every session of the cache, and removes what it left afterwards; it is
not started with the cluster (a second session's cluster would then have none, or break the
first's).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from deploy import supervisor
from deploy.devcluster.components import SERVICE_CIDR
from deploy.devcluster.config import Settings
from deploy.devcluster.gotool import BuildError, build_lock, machine_file_lock, run_go
from deploy.devcluster.node.render import NodePaths

KUBE_ROUTER_VERSION = "v2.1.0"
KUBE_ROUTER_MODULE = "github.com/cloudnativelabs/kube-router/v2"
READY_TIMEOUT = 60.0
# What kube-router makes in the filter table and in ipset; removed after each run.
CHAIN_PREFIXES = ("KUBE-ROUTER-", "KUBE-NWPLCY-", "KUBE-POD-FW-")
SET_PREFIXES = ("KUBE-SRC-", "KUBE-DST-", "inet6:KUBE-")
BRIDGE_NF = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")


class FirewallError(RuntimeError):
    """The enforcer could not be built or started; the message says what failed and its log."""


def router_dir(settings: Settings) -> Path:
    return settings.cache_dir / f"kube-router-{KUBE_ROUTER_VERSION}"


def _stamp() -> str:
    return f"{KUBE_ROUTER_MODULE}/cmd/kube-router@{KUBE_ROUTER_VERSION} CGO_ENABLED=0"


def built(settings: Settings) -> bool:
    folder = router_dir(settings)
    stamp = folder / "build.stamp"
    return (
        (folder / "kube-router").is_file()
        and stamp.is_file()
        and stamp.read_text().strip() == _stamp()
    )


def build_kube_router(settings: Settings) -> Path:
    """`go install` kube-router once into the cache (idempotent, under the build lock)."""
    folder = router_dir(settings)
    with build_lock(settings):
        if built(settings):
            return folder / "kube-router"
        started = time.monotonic()
        folder.mkdir(parents=True, exist_ok=True)
        # Outside a main module: kube-router's own go.mod and go.sum decide every dependency.
        run_go(["install", "-v", "-trimpath", f"{KUBE_ROUTER_MODULE}/cmd/kube-router@"
                 f"{KUBE_ROUTER_VERSION}"], Path(tempfile.gettempdir()),
                f"kube-router {KUBE_ROUTER_VERSION}", {"GOBIN": str(folder)})  # fmt: skip
        (folder / "build.stamp").write_text(_stamp() + "\n")
        print(f"[build] kube-router in {folder} ({time.monotonic() - started:.0f}s)", flush=True)
    return folder / "kube-router"


def check_host() -> None:
    """iptables and ipset on PATH, and bridged traffic handed to iptables; say how to fix."""
    missing = [tool for tool in ("iptables", "iptables-save", "ipset") if not shutil.which(tool)]
    if missing:
        raise BuildError(
            f"the NetworkPolicy enforcer needs {', '.join(missing)}: run deploy/local/bootstrap.sh "
            "(installs the Debian packages iptables and ipset) or apt-get install them"
        )
    if not BRIDGE_NF.is_file() or BRIDGE_NF.read_text().strip() != "1":
        raise BuildError(
            f"{BRIDGE_NF} is not 1: traffic between pods of the node's bridge never reaches "
            "iptables, so no policy would hold. `modprobe br_netfilter` and "
            "`sysctl net.bridge.bridge-nf-call-iptables=1`"
        )


def _chains() -> list[str]:
    out = subprocess.run(["iptables", "-t", "filter", "-S"], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    return [line.split()[1] for line in out.splitlines()
            if line.startswith("-N ") and line.split()[1].startswith(CHAIN_PREFIXES)]  # fmt: skip


def _sets() -> list[str]:
    sets = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True, check=False)
    return [name for name in sets.stdout.split() if name.startswith(SET_PREFIXES)]


def leftovers() -> list[str]:
    """kube-router's chains and sets still on this machine (none once `enforcing` ended)."""
    return [*_chains(), *_sets()]


def _remove_rules() -> None:
    """Drop kube-router's jumps from the built-in chains, then its chains, then its sets."""
    out = subprocess.run(["iptables", "-t", "filter", "-S"], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    for line in out.splitlines():
        words = shlex.split(line)  # comments are quoted and hold spaces
        if (
            words[:1] == ["-A"]
            and words[1] in {"INPUT", "FORWARD", "OUTPUT"}
            and any(w.startswith(CHAIN_PREFIXES) for w in words[2:])
        ):
            subprocess.run(["iptables", "-t", "filter", "-D", *words[1:]], check=False)
    chains = _chains()
    for chain in chains:
        subprocess.run(["iptables", "-t", "filter", "-F", chain], check=False)
    for chain in chains:
        subprocess.run(["iptables", "-t", "filter", "-X", chain], check=False)
    for name in _sets():
        subprocess.run(["ipset", "destroy", name], capture_output=True, check=False)


def machine_lock(settings: Settings) -> contextlib.AbstractContextManager[None]:
    """One enforcer per machine: a second session waits here until the first is done."""
    return machine_file_lock(
        settings.cache_dir / ".netpol.lock",
        "[netpol] another session's enforcer is running; waiting for it",
    )


def argv(binary: Path, node: NodePaths, kubeconfig: Path) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={node.name}",  # the node whose pods it guards (its InternalIP)
        "--run-firewall=true",
        "--run-router=false",
        "--run-service-proxy=false",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--health-port=0",  # no listener: sessions would collide on the default port
        "--metrics-port=0",
        "--v=1",
    ]


@contextlib.contextmanager
def enforcing(settings: Settings, node: NodePaths, kubeconfig: Path) -> Iterator[Path]:
    """kube-router's firewall for `node` while the block runs; yields its log. On the way out it
    is stopped and its chains and sets are removed (leftovers() is then empty)."""
    check_host()
    binary = build_kube_router(settings)
    log = settings.log_path(f"kube-router-{node.name}")
    with machine_lock(settings):
        _remove_rules()  # a run killed before its cleanup left them
        proc = supervisor.spawn(argv(binary, node, kubeconfig), log, dict(os.environ))
        try:
            deadline = time.monotonic() + READY_TIMEOUT
            while "KUBE-ROUTER-FORWARD" not in _chains():
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
                    raise FirewallError(f"kube-router for {node.name} made no chains "
                                        f"(exit {proc.poll()}); {log}:\n{tail}")  # fmt: skip
                time.sleep(0.2)
            yield log
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            _remove_rules()
