"""The images tier: build both images twice from this commit, unpack them, run them in a chroot.

`built` builds in this working tree and again from a fresh clone elsewhere (each from nothing:
no cached root filesystem) and yields both reports. `rootfs(image)` unpacks an image's layers, in
order, into a folder, the way a container runtime does (our layers hold no whiteouts).
`run_in(root, argv, env)` runs argv as the image's user in that root filesystem, mounted
read-only, with a private /tmp, under `unshare` + `chroot`: what a pod with
readOnlyRootFilesystem and an emptyDir on /tmp gets.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from deploy.images.build import REPO, build_images

# The image's PATH replaces the host's below: name the host tools by their full path.
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"


def _clone(dest: Path) -> Path:
    """A fresh clone of this commit plus the working tree's uncommitted changes, if any.

    Its files are checked out now, in another folder: what a CI runner or an operator has.
    The repository's .venv is linked in (pip and the C headers come from there).
    """

    def git(*args: str, cwd: Path = REPO, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, **kw)

    git("clone", "--quiet", "--no-hardlinks", str(REPO), str(dest))
    git("checkout", "--quiet", git("rev-parse", "HEAD", text=True).stdout.strip(), cwd=dest)
    diff = git("diff", "HEAD", "--binary").stdout
    if diff:
        subprocess.run(["git", "apply", "-"], cwd=dest, input=diff, check=True)
    (dest / ".venv").symlink_to(REPO / ".venv")
    return dest


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> tuple[dict, dict, Path]:
    """Build in this working tree, then again from a fresh clone of the same commit."""
    if os.geteuid() != 0:
        pytest.fail("the images tier needs root (mmdebstrap, chroot, unshare)", pytrace=False)
    first_dir = tmp_path_factory.mktemp("first")
    first = build_images(first_dir / "oci", first_dir / "work")
    shutil.rmtree(first_dir / "work")
    second_dir = tmp_path_factory.mktemp("second")
    clone = _clone(second_dir / "clone")
    proc = subprocess.run(
        [sys.executable, "-m", "deploy.images", "build", "--out", str(second_dir / "oci"),
         "--work", str(second_dir / "work")],
        cwd=clone, env={**os.environ, "PYTHONPATH": str(clone)},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    shutil.rmtree(second_dir / "work")
    second = json.loads((second_dir / "images.json").read_text())
    return first, second, first_dir / "oci"


def _blob(layout: Path, digest: str) -> Path:
    return layout / "blobs" / "sha256" / digest.split(":", 1)[1]


def image_config(layout: Path, manifest_digest: str) -> dict:
    manifest = json.loads(_blob(layout, manifest_digest).read_text())
    return json.loads(_blob(layout, manifest["config"]["digest"]).read_text())


@pytest.fixture(scope="session")
def unpack(built, tmp_path_factory):
    first, _, layout = built
    roots: dict[str, Path] = {}

    def _unpack(image: str) -> tuple[Path, dict]:
        manifest_digest = first[image]["manifest"]
        if image not in roots:
            root = tmp_path_factory.mktemp(image)
            root.chmod(0o755)  # a runtime's root is world-readable; mktemp's is 0700
            manifest = json.loads(_blob(layout, manifest_digest).read_text())
            for layer in manifest["layers"]:
                with tarfile.open(_blob(layout, layer["digest"]), "r:gz") as tar:
                    # Our own layers: absolute symlinks (/etc/alternatives) must stay as they are.
                    tar.extractall(root, filter="fully_trusted")  # noqa: S202
            roots[image] = root
        return roots[image], image_config(layout, manifest_digest)

    return _unpack


def run_in(root: Path, config: dict, argv: list[str], extra_env: dict[str, str] | None = None):
    """Run argv (after the image's entrypoint) as the image's user, root filesystem read-only."""
    env = dict(item.split("=", 1) for item in config["config"]["Env"])
    env.update(extra_env or {})
    user = config["config"]["User"]
    workdir = config["config"]["WorkingDir"]
    command = [*config["config"]["Entrypoint"], *argv]
    script = (
        'set -e; R="$1"; shift; mount --bind "$R" "$R"; mount -o remount,bind,ro "$R"; '
        'mount -t tmpfs tmpfs "$R/tmp"; mount -t proc proc "$R/proc"; '
        f'exec {CHROOT} --userspec={user} "$R" /bin/sh -c \'cd {workdir} && exec "$@"\' sh "$@"'
    )
    return subprocess.run(
        ["unshare", "--mount", "--pid", "--fork", "sh", "-c", script, "sh", str(root), *command],
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **env},
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
    )  # fmt: skip
