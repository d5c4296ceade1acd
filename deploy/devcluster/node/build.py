"""containerd, its runc shim and ctr from the Go module proxy; the pause image from C.

`go install github.com/containerd/containerd/v2/cmd/...@<version>` into
`<cache>/containerd-<version>/`, under the control plane's build lock (one build at a time per
cache), with a stamp so a second call is a no-op. runc and the CNI plugins are Debian's
(`deploy/local/bootstrap.sh`). The pause image (and the NetworkPolicy test's
`netcheck` probe) is a static build of one C file written as an OCI archive with a fully
qualified name: an unqualified name makes containerd try a registry.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from deploy.devcluster.config import Settings
from deploy.devcluster.gotool import BuildError, build_lock, run_go
from deploy.images.oci import ImageSpec, Layout

CONTAINERD_VERSION = "v2.4.2"
CONTAINERD_MODULE = "github.com/containerd/containerd/v2"
CONTAINERD_COMMANDS = ("containerd", "containerd-shim-runc-v2", "ctr")
PAUSE_IMAGE = "registry.tranche.dev/pause:1"
PAUSE_SOURCE = Path(__file__).with_name("pause.c")
NETCHECK_IMAGE = "registry.tranche.dev/netcheck:1"
NETCHECK_SOURCE = Path(__file__).with_name("netcheck.c")
RUNC = Path("/usr/sbin/runc")
CNI_BIN_DIR = Path("/usr/lib/cni")
EPOCH = 1_700_000_000  # fixed mtimes: the pause image's digest depends only on pause.c and gcc


def containerd_dir(settings: Settings) -> Path:
    return settings.cache_dir / f"containerd-{CONTAINERD_VERSION}"


def _stamp() -> str:
    return f"{CONTAINERD_MODULE}@{CONTAINERD_VERSION} {' '.join(CONTAINERD_COMMANDS)}"


def containerd_built(settings: Settings) -> bool:
    folder = containerd_dir(settings)
    stamp = folder / "build.stamp"
    return (
        all((folder / name).is_file() for name in CONTAINERD_COMMANDS)
        and stamp.is_file()
        and stamp.read_text().strip() == _stamp()
    )


def build_containerd(settings: Settings) -> Path:
    """Build containerd, the shim and ctr once (idempotent); return their folder."""
    folder = containerd_dir(settings)
    with build_lock(settings):
        if containerd_built(settings):
            return folder
        started = time.monotonic()
        folder.mkdir(parents=True, exist_ok=True)
        packages = [
            f"{CONTAINERD_MODULE}/cmd/{c}@{CONTAINERD_VERSION}" for c in CONTAINERD_COMMANDS
        ]
        # Outside a main module: containerd's own go.mod and go.sum decide every dependency.
        run_go(["install", "-v", "-trimpath", *packages], Path(tempfile.gettempdir()),
               f"containerd {CONTAINERD_VERSION}", {"GOBIN": str(folder)})  # fmt: skip
        (folder / "build.stamp").write_text(_stamp() + "\n")
        print(f"[build] containerd in {folder} ({time.monotonic() - started:.0f}s)", flush=True)
    return folder


def check_host_tools() -> None:
    """runc and the CNI plugins come from Debian; say how to get them when missing."""
    missing = [str(p) for p in (RUNC, CNI_BIN_DIR / "bridge", CNI_BIN_DIR / "host-local",
                                CNI_BIN_DIR / "loopback") if not p.exists()]  # fmt: skip
    if missing:
        raise BuildError(
            f"real nodes need {', '.join(missing)}: run deploy/local/bootstrap.sh (installs the "
            "Debian packages runc and containernetworking-plugins) or apt-get install them"
        )


def pause_archive(settings: Settings) -> Path:
    """The pause image as an OCI archive in the cache, rebuilt when pause.c changes."""
    return _static_image(settings, PAUSE_SOURCE, PAUSE_IMAGE, "pause")


def netcheck_archive(settings: Settings) -> Path:
    """The network-policy probe (`netcheck.c`: a tiny HTTP server and a connection prober) as
    an OCI archive in the cache, for the real node's NetworkPolicy test."""
    return _static_image(settings, NETCHECK_SOURCE, NETCHECK_IMAGE, "netcheck")


def _static_image(settings: Settings, source_file: Path, image: str, name: str) -> Path:
    """A static build of one C file as the only file of an image (entrypoint /<name>)."""
    source = source_file.read_bytes()
    key = hashlib.sha256(source).hexdigest()[:16]
    out = containerd_dir(settings) / f"{name}-{key}.tar"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"tranche-{name}-") as tmp:
        binary = Path(tmp) / name
        cc = shutil.which(os.environ.get("CC", "gcc")) or "gcc"
        proc = subprocess.run([cc, "-static", "-Os", "-s", "-Wall", "-Wextra", "-Werror", "-o",
                               str(binary), str(source_file)],
                              capture_output=True, text=True, check=False)  # fmt: skip
        if proc.returncode != 0:
            raise BuildError(f"{name} image: {cc} failed: {proc.stderr.strip()}")
        write_archive(out, image, [(binary, name)], [f"/{name}"])
    return out


def write_archive(out: Path, name: str, files: list[tuple[Path, str]], entrypoint: list[str],
                  env: list[str] | None = None) -> None:  # fmt: skip
    """An OCI image of `files` (host path, image path; parents first) as one tar archive that
    `ctr images import` reads; the reference is fully qualified."""
    repo, tag = name.rsplit(":", 1)
    with tempfile.TemporaryDirectory(prefix="tranche-oci-") as tmp:
        layout = Layout(Path(tmp))
        layer = layout.write_layer("rootfs", files, EPOCH)
        spec = ImageSpec(name=repo, tag=tag, user="0:0", entrypoint=entrypoint, cmd=[],
                         env=env or ["PATH=/usr/local/bin:/usr/bin:/bin"], workdir="/")  # fmt: skip
        layout.write_image(spec, [layer], "2023-11-14T22:13:20Z")
        index = Path(tmp) / "index.json"
        # ctr reads the full name from containerd's own annotation.
        doc = json.loads(index.read_text())
        for manifest in doc["manifests"]:
            manifest["annotations"]["io.containerd.image.name"] = name
        index.write_text(json.dumps(doc, sort_keys=True, separators=(",", ":")))
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(Path(tmp).rglob("*")):
                info = tar.gettarinfo(str(path), str(path.relative_to(tmp)))
                info.mtime, info.uname, info.gname, info.uid, info.gid = EPOCH, "", "", 0, 0
                if info.isreg():
                    with path.open("rb") as handle:
                        tar.addfile(info, handle)
                else:
                    tar.addfile(info)
        tmp_out = out.with_suffix(".part")
        tmp_out.write_bytes(raw.getvalue())
        tmp_out.replace(out)
