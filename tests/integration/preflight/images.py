"""Real test images for pre-flight: CUDA libraries from PyPI wheels, packed into OCI images.

`cuda_library(flavour)` downloads the wheel once with pip into ~/.cache/tranche/preflight and keeps
only `libcurand.so.10` (the wheel is deleted). `packed_layer()` packs files into one gzip layer,
cached by content so a rerun does not compress 100+ MB again; `push_image()`
(deploy/ociregistry/push.py, shared with `make run`'s samples) pushes config, layers and
manifest through the distribution API, exactly as a client would.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

from deploy.ociregistry.push import diff_id, push_image, tar_layer

__all__ = ["CACHE", "LIB_PATH", "cuda_library", "diff_id", "packed_layer", "push_image"]

CACHE = Path.home() / ".cache" / "tranche" / "preflight"
# flavour -> (pip requirement, path of the library inside the wheel)
WHEELS = {
    "cu12": ("nvidia-curand-cu12==10.3.10.19", "nvidia/curand/lib/libcurand.so.10"),
    "cu13": ("nvidia-curand==10.4.4.72", "nvidia/cu13/lib/libcurand.so.10"),
}
LIB_PATH = "usr/local/lib/libcurand.so.10"


def cuda_library(flavour: str) -> Path:
    """The real libcurand.so.10 of a CUDA 12 (has sm_70) or CUDA 13 (no Volta) wheel."""
    requirement, inner = WHEELS[flavour]
    target = CACHE / flavour / "libcurand.so.10"
    if target.is_file():
        return target
    download = CACHE / "download"
    download.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
         "--platform", "manylinux_2_27_x86_64", "--python-version", "3.11",
         "-d", str(download), requirement],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    name = requirement.split("==")[0].replace("-", "_")
    wheel = next(download.glob(f"{name}-*.whl"))
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive, archive.open(inner) as src:
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(src.read())
        tmp.replace(target)
    wheel.unlink()
    return target


def packed_layer(files: dict[str, Path | bytes]) -> bytes:
    """A gzip tar layer of `files` (path in image -> content), cached by content."""
    key = hashlib.sha256()
    for path, content in sorted(files.items()):
        key.update(path.encode())
        key.update(content if isinstance(content, bytes) else str(content.stat()).encode())
    cached = CACHE / "layers" / f"{key.hexdigest()[:24]}.tar.gz"
    if cached.is_file():
        return cached.read_bytes()
    layer = tar_layer({p: c if isinstance(c, bytes) else c.read_bytes() for p, c in files.items()})
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(layer)
    return layer
