"""Build helm from the Go module proxy into `<cache>/helm-<version>/helm`.

The chart tests and `make chart-lint` need helm; no binary is ever downloaded. `helm/go.mod`
pins helm (`tool helm.sh/helm/v3/cmd/helm`) and `helm/go.sum` its whole dependency tree, so
the build is the same one everywhere. A stamp holding a hash of go.mod/go.sum and the flags
makes `ensure_helm()` a no-op when nothing changed. On failure the previous binary is left in
place and the `BuildError` carries the `go` output (see deploy.devcluster.gotool).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from deploy.devcluster.gotool import BuildError, find_go, run_go

TOOLS_DIR = Path(__file__).resolve().parent
HELM_MODULE = TOOLS_DIR / "helm"
STAMP_NAME = "build.stamp"

__all__ = ["BuildError", "ensure_helm", "find_go", "helm_version"]


def helm_version() -> str:
    """The helm release pinned in helm/go.mod (one place to change it)."""
    match = re.search(r"^\s*helm\.sh/helm/v3 (v\S+)", (HELM_MODULE / "go.mod").read_text(), re.M)
    if not match:
        raise BuildError(f"{HELM_MODULE / 'go.mod'} does not require helm.sh/helm/v3")
    return match.group(1)


def _ldflags(version: str) -> str:
    # helm prints this version (`helm version`) and sends it as its user agent.
    return f"-s -w -X helm.sh/helm/v3/internal/version.version={version}"


def _stamp(version: str) -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((HELM_MODULE / name).read_bytes())
    digest.update(_ldflags(version).encode())
    return digest.hexdigest()


def cache_dir() -> Path:
    value = os.environ.get("TRANCHE_CACHE")
    return Path(value).expanduser() if value else Path.home() / ".cache" / "tranche"


def ensure_helm(force: bool = False) -> Path:
    """Return the path of the pinned helm, building it first when missing or stale."""
    version = helm_version()
    out_dir = cache_dir() / f"helm-{version}"
    binary = out_dir / "helm"
    stamp = out_dir / STAMP_NAME
    wanted = _stamp(version)
    if not force and binary.is_file() and stamp.is_file() and stamp.read_text().strip() == wanted:
        return binary
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / "helm.tmp"
    run_go(["mod", "download"], HELM_MODULE, "download helm modules")
    args = ["build", "-v", "-trimpath", "-ldflags", _ldflags(version), "-o", str(tmp)]
    run_go([*args, "helm.sh/helm/v3/cmd/helm"], HELM_MODULE, f"build helm {version}")
    tmp.replace(binary)  # atomic: a failed build never leaves half a binary
    stamp.write_text(wanted + "\n")
    return binary
