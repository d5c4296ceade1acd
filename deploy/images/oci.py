"""Write OCI image layouts without a container daemon: deterministic layers, config, manifest.

Why our own writer rather than crane/umoci/buildah: the rootfs is already a folder built here
(mmdebstrap + pip + the repository), so all that is left is tar + gzip + three JSON documents
(OCI image-spec v1.1). Doing that in ~150 lines of stdlib Python needs no Go build, no storage
driver, no user namespaces, and lets us pin every byte that decides a digest: entries sorted by
path, every mtime set to SOURCE_DATE_EPOCH, owners numeric (names dropped), gzip header with
mtime 0 and no file name, JSON with sorted keys. Same inputs -> same layer digests.

Output: an OCI image layout folder (`oci-layout`, `index.json`, `blobs/sha256/...`), which
skopeo, crane, containerd (`ctr image import` of its tar) and registries' push tools accept.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"


@dataclass(frozen=True)
class Layer:
    """One written layer: its compressed blob digest and size, and its uncompressed diff_id."""

    digest: str
    diff_id: str
    size: int
    uncompressed: int
    name: str


@dataclass
class ImageSpec:
    """What goes into an image config besides the layers."""

    name: str
    tag: str
    user: str
    entrypoint: list[str]
    cmd: list[str]
    env: list[str]
    workdir: str
    labels: dict[str, str] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()


def _json_bytes(doc: dict) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


class Layout:
    """An OCI image layout folder: blobs are content-addressed, index.json lists the images."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs = root / "blobs" / "sha256"
        self.blobs.mkdir(parents=True, exist_ok=True)
        (root / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
        self.manifests: list[dict] = []

    def put_blob(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        (self.blobs / digest).write_bytes(data)
        return f"sha256:{digest}"

    def write_layer(self, name: str, paths: Iterable[tuple[Path, str]], epoch: int) -> Layer:
        """Tar `(host path, path in image)` pairs (already sorted, parents first) and gzip it."""
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for host, arcname in paths:
                info = tar.gettarinfo(str(host), arcname)
                # Every entry gets the commit's time: checkout times differ between clones.
                info.mtime = epoch
                info.uname = info.gname = ""
                if info.isreg():
                    with host.open("rb") as handle:
                        tar.addfile(info, handle)
                else:
                    tar.addfile(info)
        data = raw.getvalue()
        packed = io.BytesIO()
        # mtime=0 and no file name: the gzip header carries nothing that varies between builds.
        with gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0, compresslevel=6) as gz:
            gz.write(data)
        blob = packed.getvalue()
        digest = self.put_blob(blob)
        diff_id = f"sha256:{hashlib.sha256(data).hexdigest()}"
        return Layer(digest, diff_id, len(blob), len(data), name)

    def write_image(self, spec: ImageSpec, layers: list[Layer], created: str) -> dict:
        """Write config + manifest for `layers`; return the manifest descriptor in index.json."""
        config = {
            "architecture": "amd64",
            "os": "linux",
            "created": created,
            "config": {
                "User": spec.user,
                "Entrypoint": spec.entrypoint,
                "Cmd": spec.cmd,
                "Env": spec.env,
                "WorkingDir": spec.workdir,
                "Labels": spec.labels,
            },
            "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
            "history": [{"created": created, "created_by": f"tranche {layer.name}"}
                        for layer in layers],
        }  # fmt: skip
        config_bytes = _json_bytes(config)
        manifest = {
            "schemaVersion": 2,
            "mediaType": MEDIA_MANIFEST,
            "config": {
                "mediaType": MEDIA_CONFIG,
                "digest": self.put_blob(config_bytes),
                "size": len(config_bytes),
            },
            "layers": [
                {"mediaType": MEDIA_LAYER, "digest": layer.digest, "size": layer.size}
                for layer in layers
            ],
            "annotations": {
                k: v for k, v in spec.labels.items() if k.startswith("org.opencontainers")
            },
        }
        manifest_bytes = _json_bytes(manifest)
        digest = self.put_blob(manifest_bytes)
        # One index entry per reference: `<name>:<version>-<revision>` and `<name>:<version>`.
        for tag in (spec.tag, *spec.aliases):
            descriptor = {
                "mediaType": MEDIA_MANIFEST,
                "digest": digest,
                "size": len(manifest_bytes),
                "annotations": {"org.opencontainers.image.ref.name": f"{spec.name}:{tag}"},
            }
            self.manifests.append(descriptor)
        index = {"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": self.manifests}
        (self.root / "index.json").write_bytes(_json_bytes(index))
        return descriptor


def tree_entries(
    root: Path, include: Callable[[str], bool], prefix: str = ""
) -> list[tuple[Path, str]]:
    """Every path under `root` (sorted, parents before children) whose image path `include`s.

    Image paths are relative ("usr/bin/python3"), as OCI layers store them.
    """
    entries: list[tuple[Path, str]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        for name in [*sorted(dirnames), *sorted(filenames)]:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if include(rel):
                entries.append((Path(dirpath) / name, prefix + rel))
    # os.walk lists a folder's children before descending, so sort by path to put each file
    # right after its parents in one stable order.
    entries.sort(key=lambda entry: entry[1].split("/"))
    return entries
