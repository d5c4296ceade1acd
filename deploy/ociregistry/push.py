"""Pushing an OCI image to a registry through the distribution API, exactly as a client would.

One home for it: `make run`'s pre-flight samples (`samples.py`) and the pre-flight tests' images
(tests/integration/preflight/images.py) both push with `push_image()`. Plain HTTP only: it is
meant for the project's own loopback registry.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import zlib

import urllib3


class PushError(RuntimeError):
    """The registry refused a step of the push; the message names the step and its answer."""


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def diff_id(layer: bytes) -> str:
    """The digest of the uncompressed layer, streamed (a test bomb inflates to gigabytes)."""
    digest = hashlib.sha256()
    inflate = zlib.decompressobj(31)
    for start in range(0, len(layer), 1 << 16):
        digest.update(inflate.decompress(layer[start : start + (1 << 16)]))
    digest.update(inflate.flush())
    return "sha256:" + digest.hexdigest()


def tar_layer(files: dict[str, bytes], mode: int = 0o755) -> bytes:
    """A reproducible gzip tar layer of `files` (path in image -> content)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = mode
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), compresslevel=1, mtime=0)


def push_blob(http: urllib3.PoolManager, base: str, data: bytes) -> str:
    digest = sha256_digest(data)
    start = http.request("POST", f"{base}/blobs/uploads/")
    if start.status != 202:
        raise PushError(f"starting a blob upload to {base} answered HTTP {start.status}")
    location = start.headers["Location"]
    if location.startswith("/"):
        location = base.split("/v2/", maxsplit=1)[0] + location
    sep = "&" if "?" in location else "?"
    put = http.request(
        "PUT", f"{location}{sep}digest={digest}", body=data,
        headers={"Content-Type": "application/octet-stream"},
    )  # fmt: skip
    if put.status != 201:
        raise PushError(f"uploading {digest} answered HTTP {put.status}: {put.data[:200]!r}")
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
    if put.status != 201:
        raise PushError(
            f"putting {repository}:{tag} answered HTTP {put.status}: {put.data[:200]!r}"
        )
    return f"{host}/{repository}:{tag}"
