"""Build Tranche's two container images without a container daemon.

One root filesystem is assembled in a work folder, then cut into layers by path:

| layer | paths | in |
|---|---|---|
| debian | everything from `mmdebstrap` (Debian bookworm, `essential` + python3) | both images |
| python | `/opt/tranche/lib`: `requirements.txt` by pip `--target`, what both need | both |
| python-portal | packages only portal/worker/beat/watcher need (Django, Celery, ...) | tranche |
| python-agent | packages only the node agent needs (grpc, protobuf, NVML) | tranche-node-agent |
| app | `/opt/tranche/app`: every top-level package git tracks, manage.py, static files | both |
| native | `/usr/lib/tranche/`: the core `libtranche.so`, `simgpu/` | tranche-node-agent |

(`simgpu/`: the simulated driver, mounted into containers only by an agent run `--simulate`.)

Sources: the Debian mirror (apt), PyPI (pip) and this repository: no base image from an image
registry. Reproducible: SOURCE_DATE_EPOCH is the commit's time, mmdebstrap honours it, Python
files are byte-compiled with `unchecked-hash` pycs (no mtimes), the C core is built with the
source path mapped away, and `oci.Layout` normalises tar entries and gzip headers. What can
still differ between two builds is what the mirrors serve: a Debian point release or a
security update in between changes the debian layer (see docs/install.md).

Needs root (mmdebstrap's root mode, chroot for byte-compiling with the image's own python).
"""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from deploy.images import python
from deploy.images.oci import ImageSpec, Layer, Layout, tree_entries

REPO = Path(__file__).resolve().parents[2]
SUITE = "bookworm"
MIRROR = os.environ.get("TRANCHE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# python3 is the runtime; ca-certificates for TLS to PostgreSQL/Redis/the API server; tzdata
# for zoneinfo (kombu and Django look up "UTC" by name); libstdc++6 for grpc's extension.
# usr-is-merged stands in for usrmerge (init-system-helpers wants one of the two), which the
# essential set brings with perl (46 MB) for a /usr conversion this fresh layout never needs.
# Pango (with fontconfig, HarfBuzz and one font family, DejaVu) for WeasyPrint's invoice PDFs:
# without it an installed portal answered 503 for every PDF. In the shared debian layer, so the
# agent image carries it too (+~20 MB): a portal-only Debian layer is left to do.
DEBIAN_PACKAGES = ("python3", "ca-certificates", "tzdata", "libstdc++6", "usr-is-merged",
                   "libpango-1.0-0", "libpangoft2-1.0-0", "fonts-dejavu-core")  # fmt: skip
PURGED = ("usrmerge", "libfile-find-rule-perl", "libnumber-compare-perl", "libtext-glob-perl",
          "perl", "libperl5.36", "perl-modules-5.36")  # fmt: skip
# Documentation, man pages and translations are never read in a container; glibc's iconv
# modules (gconv, 9 MB) neither: Python decodes with its own codecs.
DPKG_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*",
                 "/usr/share/info/*", "/usr/share/lintian/*",
                 "/usr/lib/x86_64-linux-gnu/gconv/*")  # fmt: skip
USER_ID = 10001
APP_DIR = "opt/tranche/app"
LIB_DIR = "opt/tranche/lib"
NATIVE_DIR = "usr/lib/tranche"
SIMGPU_FILES = ("libcuda.so.1", "libnvidia-ml.so.1", "nvidia-smi")
# Top-level packages that are development only: tests and benchmarks never ship.
NOT_SHIPPED = frozenset({"tests", "bench"})
IMAGE_PREFIX = "tranche"


class ImageBuildError(RuntimeError):
    """A build step failed; the message names the step and carries its output."""


@dataclass(frozen=True)
class Source:
    """What the images are built from: the commit, its time, and the version."""

    revision: str
    epoch: int
    version: str

    @property
    def tag(self) -> str:
        return f"{self.version}-{self.revision[:12]}"

    @property
    def created(self) -> str:
        moment = datetime.datetime.fromtimestamp(self.epoch, tz=datetime.UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _run(cmd: list[str], step: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> str:
    started = time.monotonic()
    print(f"[images] {step} ...", flush=True)
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ImageBuildError(
            f"{step} failed (exit {proc.returncode}): {' '.join(cmd)}\n"
            f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    print(f"[images] {step}: {time.monotonic() - started:.0f}s", flush=True)
    return proc.stdout


def read_source() -> Source:
    """The commit the images are built from; a dirty tree is marked in the revision."""
    git = ["git", "-C", str(REPO)]
    revision = _run([*git, "rev-parse", "HEAD"], "git revision").strip()
    epoch = int(_run([*git, "log", "-1", "--format=%ct"], "git commit time").strip())
    if _run([*git, "status", "--porcelain", "--untracked-files=no"], "git status").strip():
        revision += "-dirty"
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    return Source(revision, epoch, version)


def shipped_files() -> list[str]:
    """Tracked files of every top-level Python package (derived, not listed) and manage.py."""
    tracked = _run(["git", "ls-files", "-z"], "git ls-files").split("\0")
    packages = {
        path.split("/")[0]
        for path in tracked
        if path.count("/") == 1 and path.endswith("/__init__.py")
    } - NOT_SHIPPED
    files = [p for p in tracked if p and (p.split("/")[0] in packages or p == "manage.py")]
    return sorted(f for f in files if (REPO / f).is_file())


def build_debian(rootfs: Path, source: Source) -> None:
    if not shutil.which("mmdebstrap"):
        raise ImageBuildError(
            "mmdebstrap is not installed: the images' root filesystem is built with it "
            "(apt-get install mmdebstrap, Debian 12 and later)"
        )
    if os.geteuid() != 0:
        raise ImageBuildError("run as root: mmdebstrap's root mode and chroot need it")
    passwd = f"tranche:x:{USER_ID}:{USER_ID}:Tranche:/nonexistent:/usr/sbin/nologin"
    hook = (
        f'echo "{passwd}" >> "$1/etc/passwd" && echo "tranche:x:{USER_ID}:" >> "$1/etc/group"'
        f' && chroot "$1" dpkg --purge {" ".join(PURGED)}'
    )
    cmd = [
        "mmdebstrap", "--mode=root", "--variant=essential", "--format=directory",
        f"--include={','.join(DEBIAN_PACKAGES)}",
        *[f"--dpkgopt=path-exclude={pattern}" for pattern in DPKG_EXCLUDES],
        f"--customize-hook={hook}",
        SUITE, str(rootfs), MIRROR,
    ]  # fmt: skip
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(source.epoch)}
    _run(cmd, "debian root filesystem (mmdebstrap)", env=env)


def install_python(rootfs: Path) -> None:
    python.install(rootfs / LIB_DIR, REPO / "requirements.txt", _run)


def install_app(rootfs: Path) -> None:
    app = rootfs / APP_DIR
    for rel in shipped_files():
        dest = app / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, dest)


def _chroot_python(rootfs: Path, args: list[str], step: str, env: dict[str, str]) -> None:
    base = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"/{APP_DIR}:/{LIB_DIR}",
            "PYTHONHASHSEED": "0", "HOME": "/nonexistent",
            # collectstatic must not leave mtime-stamped pycs for compileall to keep.
            "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    chroot = shutil.which("chroot") or "/usr/sbin/chroot"
    _run([chroot, str(rootfs), "/usr/bin/python3", *args], step, env={**base, **env})


def finish_app(rootfs: Path, source: Source) -> None:
    """Static files for whitenoise, then byte-compile everything with mtime-free pycs."""
    build_only = {  # production settings need these to import; nothing is served or stored
        "TRANCHE_SECRET_KEY": "image-build-" + "x" * 32,
        "TRANCHE_ALLOWED_HOSTS": "image.build",
    }
    manage = f"/{APP_DIR}/manage.py"
    _chroot_python(rootfs, [manage, "collectstatic", "--noinput", "-v0"], "collectstatic",
                   build_only)  # fmt: skip
    # -f: recompile whatever exists, so every pyc is hash-based (pip's files carry build-time
    # mtimes; a timestamp pyc would differ between two builds of the same commit).
    compile_args = ["-m", "compileall", "-q", "-f", "-j0", "--invalidation-mode", "unchecked-hash"]
    _chroot_python(rootfs, [*compile_args, f"/{LIB_DIR}", f"/{APP_DIR}"], "byte-compile", {})
    del source


def build_native(rootfs: Path, work: Path) -> None:
    build = work / "native"
    # The source folder's absolute path would otherwise end up in the debug info.
    flags = f"EXTRA_CFLAGS=-ffile-prefix-map={REPO}=."
    # simgpu too: a chart installed with `nodeAgent.simulate` (the dev cluster's real node has
    # no GPU) mounts it into tenants' containers from the node, as the core. The agent never
    # loads it without --simulate, and nothing puts it on a library path.
    sim = [f"{build}/simgpu/{name}" for name in SIMGPU_FILES]
    _run(["make", "-s", "-C", str(REPO / "nodeagent" / "native"), f"BUILD={build}", flags,
          f"{build}/libtranche.so", *sim], "interception core and simgpu (make)")  # fmt: skip
    dest = rootfs / NATIVE_DIR
    (dest / "simgpu").mkdir(parents=True, exist_ok=True)
    shutil.copy2(build / "libtranche.so", dest / "libtranche.so")
    os.chmod(dest / "libtranche.so", 0o755)  # noqa: S103 - a library every user loads
    for name in SIMGPU_FILES:
        shutil.copy2(build / "simgpu" / name, dest / "simgpu" / name)
        os.chmod(dest / "simgpu" / name, 0o755)  # noqa: S103 - loaded by every container's user


def _under(prefix: str):
    return lambda rel: rel == prefix or rel.startswith(prefix + "/")


def _debian_part(rel: str) -> bool:
    return not any(_under(p)(rel) for p in (APP_DIR, LIB_DIR, NATIVE_DIR))


def _specs(source: Source) -> dict[str, ImageSpec]:
    labels = {
        "org.opencontainers.image.title": "",
        "org.opencontainers.image.version": source.version,
        "org.opencontainers.image.revision": source.revision,
        "org.opencontainers.image.created": source.created,
        "org.opencontainers.image.source": "https://github.com/tranche-dev/tranche",
        "org.opencontainers.image.licenses": "Apache-2.0",
    }
    env = [
        "PATH=/usr/local/bin:/usr/bin:/bin",
        f"PYTHONPATH=/{APP_DIR}:/{LIB_DIR}",
        "PYTHONDONTWRITEBYTECODE=1",  # the root filesystem is read-only
        "PYTHONUNBUFFERED=1",
        "DJANGO_SETTINGS_MODULE=portal.settings",
    ]
    common = {"user": f"{USER_ID}:{USER_ID}", "entrypoint": ["/usr/bin/python3"],
              "env": env, "workdir": f"/{APP_DIR}"}  # fmt: skip
    # In a pod the portal listens on the pod IP: all interfaces of its own network namespace.
    portal_cmd = [
        "-m",
        "daphne",
        "-b",
        "0.0.0.0",  # noqa: S104
        "-p",
        "8000",
        "portal.asgi:application",
    ]
    return {
        "tranche": ImageSpec(
            name=IMAGE_PREFIX, tag=source.tag, aliases=(source.version,), cmd=portal_cmd,
            labels={**labels, "org.opencontainers.image.title": "tranche"}, **common,
        ),
        "tranche-node-agent": ImageSpec(
            name=f"{IMAGE_PREFIX}-node-agent", tag=source.tag, aliases=(source.version,),
            cmd=["-m", "nodeagent", "run"],
            labels={**labels, "org.opencontainers.image.title": "tranche-node-agent"}, **common,
        ),
    }  # fmt: skip


def _remove_work(work: Path) -> None:
    """Delete a previous work folder, never through a mount an interrupted mmdebstrap left."""
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    inside = sorted((m for m in mounts if m.startswith(f"{work}/")), key=len, reverse=True)
    for mount in inside:  # deepest first
        _run(["umount", "--lazy", mount], f"unmount {mount} (left by an interrupted build)")
    shutil.rmtree(work)


def build_images(out: Path, work: Path) -> dict[str, dict]:
    """Build both images into the OCI layout `out`; return per-image digests and sizes."""
    source = read_source()
    if work.exists():
        _remove_work(work)
    if out.exists():
        shutil.rmtree(out)
    rootfs = work / "rootfs"
    work.mkdir(parents=True)
    build_debian(rootfs, source)
    install_python(rootfs)
    install_app(rootfs)
    finish_app(rootfs, source)
    build_native(rootfs, work)

    layout = Layout(out)
    epoch = source.epoch
    by_image = python.split_by_image(rootfs / LIB_DIR, REPO / "requirements.txt", LIB_DIR)
    parts = {
        "debian": _debian_part,
        "python": by_image["common"],
        "python-portal": by_image["portal"],
        "python-agent": by_image["agent"],
        "app": _under(APP_DIR),
        "native": _under(NATIVE_DIR),
    }
    layers: dict[str, Layer] = {}
    for name, include in parts.items():
        started = time.monotonic()
        layers[name] = layout.write_layer(name, tree_entries(rootfs, include), epoch)
        took = time.monotonic() - started
        print(f"[images] layer {name}: {layers[name].digest} ({took:.0f}s)", flush=True)
    members = {
        "tranche": ["debian", "python", "python-portal", "app"],
        "tranche-node-agent": ["debian", "python", "python-agent", "app", "native"],
    }
    report: dict[str, dict] = {}
    for image, spec in _specs(source).items():
        chosen = [layers[name] for name in members[image]]
        descriptor = layout.write_image(spec, chosen, source.created)
        report[image] = {
            "ref": f"{spec.name}:{spec.tag}",
            "manifest": descriptor["digest"],
            "layers": {layer.name: layer.digest for layer in chosen},
            "compressed_mb": round(sum(layer.size for layer in chosen) / 2**20, 1),
            "uncompressed_mb": round(sum(layer.uncompressed for layer in chosen) / 2**20, 1),
        }
    return report
