"""Build the control-plane binaries from the Go module proxy into the version cache.

Two Go modules are built: `k8s/` (one multi-call binary for kube-apiserver,
kube-controller-manager, kube-scheduler, the real nodes' kubelet, kubectl and kwok) and `etcd/`
(etcd's server main); then containerd for the real nodes (`node.build`) and kube-router, their
NetworkPolicy enforcer (`node.firewall`; started by the test that needs it, not by `up`).
Results go to `<cache>/k8s-<version>/` with one symlink per component name. A stamp file
records a hash of the Go sources and flags, so `ensure_built()` is a no-op when nothing
changed and a second start reuses the build. Idempotent; on failure the previous binaries
are left untouched and a `BuildError` carries the exact `go` output.
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

from deploy.devcluster.config import (
    ETCD_VERSION,
    KUBE_BUILD_DATE,
    KUBE_VERSION,
    KWOK_VERSION,
    MODULE_DIR,
    Settings,
)
from deploy.devcluster.gotool import build_lock, run_go

KUBE_COMPONENTS = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kubectl",
    "kwok",
)
STAMP_NAME = "build.stamp"


def _ldflags() -> str:
    major, minor = KUBE_VERSION.lstrip("v").split(".")[:2]
    fields = {
        "gitVersion": KUBE_VERSION,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": KUBE_BUILD_DATE,
    }
    # Both packages carry version variables: component-base for the servers'
    # /version, client-go for kubectl's client version.
    flags = [
        f"-X {pkg}.{key}={value}"
        for pkg in ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version")
        for key, value in fields.items()
    ]
    return " ".join(["-s", "-w", *flags])


def source_hash() -> str:
    """Hash of everything that decides the binaries: Go sources, go.mod/go.sum, flags."""
    digest = hashlib.sha256()
    for module in ("k8s", "etcd"):
        for path in sorted((MODULE_DIR / module).glob("*")):
            if path.suffix in {".go", ".mod", ".sum"}:
                digest.update(path.name.encode())
                digest.update(path.read_bytes())
    digest.update(_ldflags().encode())
    digest.update(f"{KUBE_VERSION} {KWOK_VERSION} {ETCD_VERSION}".encode())
    return digest.hexdigest()


def is_built(settings: Settings) -> bool:
    """True when both binaries exist and were built from the current sources."""
    stamp = settings.bin_dir / STAMP_NAME
    if not (settings.kube_binary.is_file() and settings.etcd_binary.is_file()):
        return False
    return stamp.is_file() and stamp.read_text().strip() == source_hash()


def build(settings: Settings, force: bool = False) -> Path:
    """Build both binaries, the real nodes' containerd and their NetworkPolicy enforcer
    (kube-router) into the cache (idempotent) and return the control plane's bin folder."""
    from deploy.devcluster.node import build as node_build
    from deploy.devcluster.node import firewall

    with build_lock(settings):
        if is_built(settings) and not force:
            print(f"[build] up to date: {settings.bin_dir}", flush=True)
        else:
            _build_locked(settings)
    node_build.build_containerd(settings)
    firewall.build_kube_router(settings)
    return settings.bin_dir


def _build_locked(settings: Settings) -> Path:
    bin_dir = settings.bin_dir
    started = time.monotonic()
    for module in ("k8s", "etcd"):
        run_go(["mod", "download"], MODULE_DIR / module, f"download {module} modules")
    targets = (
        ("k8s", settings.kube_binary, f"Kubernetes {KUBE_VERSION} + kwok {KWOK_VERSION}"),
        ("etcd", settings.etcd_binary, f"etcd {ETCD_VERSION}"),
    )
    for module, output, label in targets:
        tmp = output.with_suffix(".tmp")
        args = ["build", "-v", "-trimpath", "-ldflags", _ldflags(), "-o", str(tmp), "."]
        run_go(args, MODULE_DIR / module, f"build {label}")
        tmp.replace(output)  # atomic: a failed build never leaves half a binary
    for name in KUBE_COMPONENTS:
        _relink(bin_dir / name, settings.kube_binary.name)
    _relink(bin_dir / "etcd", settings.etcd_binary.name)
    (bin_dir / STAMP_NAME).write_text(source_hash() + "\n")
    print(f"[build] all binaries in {bin_dir} ({time.monotonic() - started:.0f}s)", flush=True)
    return bin_dir


def _relink(link: Path, target: str) -> None:
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


def ensure_built(settings: Settings) -> Path:
    """Build only when the cache lacks binaries for the current sources."""
    from deploy.devcluster.node import build as node_build

    if not (is_built(settings) and node_build.containerd_built(settings)):
        print("[build] binaries missing or stale; building (cold: ~30 min)", file=sys.stderr)
        build(settings)
    return settings.bin_dir
