"""Real test images for pre-flight: CUDA libraries from PyPI wheels, packed into OCI images.

`cuda_library(flavour)` downloads the wheel once with pip into ~/.cache/tranche/preflight and keeps
only `libcurand.so.10` (the wheel is deleted). `push_image()` packs files into one gzip layer and
pushes config, layer and manifest to a registry through the distribution API, exactly as a
client would; packed layers are cached by content so a rerun does not compress 100+ MB again.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import zipfile
import zlib
from pathlib import Path

import urllib3

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


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def diff_id(layer: bytes) -> str:
    """The digest of the uncompressed layer, streamed (a test bomb inflates to gigabytes)."""
    digest = hashlib.sha256()
    inflate = zlib.decompressobj(31)
    for start in range(0, len(layer), 1 << 16):
        digest.update(inflate.decompress(layer[start : start + (1 << 16)]))
    digest.update(inflate.flush())
    return "sha256:" + digest.hexdigest()


def packed_layer(files: dict[str, Path | bytes]) -> bytes:
    """A gzip tar layer of `files` (path in image -> content), cached by content."""
    key = hashlib.sha256()
    for path, content in sorted(files.items()):
        key.update(path.encode())
        key.update(content if isinstance(content, bytes) else str(content.stat()).encode())
    cached = CACHE / "layers" / f"{key.hexdigest()[:24]}.tar.gz"
    if cached.is_file():
        return cached.read_bytes()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for path, content in sorted(files.items()):
            data = content if isinstance(content, bytes) else content.read_bytes()
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(data))
    layer = gzip.compress(raw.getvalue(), compresslevel=1, mtime=0)
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(layer)
    return layer


def push_blob(http: urllib3.PoolManager, base: str, data: bytes) -> str:
    digest = _sha(data)
    start = http.request("POST", f"{base}/blobs/uploads/")
    assert start.status == 202, start.status
    location = start.headers["Location"]
    if location.startswith("/"):
        location = base.split("/v2/", maxsplit=1)[0] + location
    sep = "&" if "?" in location else "?"
    put = http.request(
        "PUT", f"{location}{sep}digest={digest}", body=data,
        headers={"Content-Type": "application/octet-stream"},
    )  # fmt: skip
    assert put.status == 201, (put.status, put.data[:200])
    return digest


def push_image(host: str, repository: str, tag: str, layers: list[bytes]) -> str:
    """Push an OCI image of `layers` (gzip tars) as host/repository:tag; returns its reference."""
    http = urllib3.PoolManager(timeout=60)
    base = f"http://{host}/v2/{repository}"
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [diff_id(x) for x in layers]},
    }).encode()  # fmt: skip
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": push_blob(http, base, config),
            "size": len(config),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": push_blob(http, base, layer),
                "size": len(layer),
            }
            for layer in layers
        ],
    }
    body = json.dumps(manifest).encode()
    put = http.request(
        "PUT", f"{base}/manifests/{tag}", body=body,
        headers={"Content-Type": manifest["mediaType"]},
    )  # fmt: skip
    assert put.status == 201, (put.status, put.data[:200])
    return f"{host}/{repository}:{tag}"
