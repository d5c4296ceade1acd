"""Load the images `make images` built into the dev cluster's real nodes, under a registry name.

`python -m deploy.images load [--registry registry.tranche.dev/tranche]` streams the OCI layout
(`.state/images/oci`) as one tar archive into each running real node's containerd
(`ctr images import`), every tag in the layout named `<registry>/<image>:<tag>`: what a node
would have after pulling them, so the chart's pods (`image.pullPolicy: IfNotPresent`) start
from exactly these bytes.

Why an import and not the loopback registry (`deploy/ociregistry`): the nodes' containerd has no
registry configuration (a plain-HTTP mirror needs a hosts.toml per node), and the node already
imports its pause and sample images this way; the bytes and digests are the same either way.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import tempfile
from pathlib import Path

from deploy.devcluster.config import Settings, load_node_settings, load_settings
from deploy.devcluster.node import build as node_build
from deploy.devcluster.node.render import NodePaths, node_paths

REGISTRY = "registry.tranche.dev/tranche"
REF_NAME = "org.opencontainers.image.ref.name"
# What ctr names an imported image by (it ignores a bare ref.name tag without --base-name).
CONTAINERD_NAME = "io.containerd.image.name"


class LoadError(RuntimeError):
    """The layout is missing or a node's containerd refused it (the message says which)."""


def named_index(layout: Path, registry: str) -> tuple[dict, list[str]]:
    """The layout's index with every manifest named `<registry>/<ref.name>`; and those names."""
    index_file = layout / "index.json"
    if not index_file.is_file():
        raise LoadError(f"{index_file} missing: run `make images` first")
    index = json.loads(index_file.read_text())
    names = []
    for manifest in index["manifests"]:
        annotations = manifest.setdefault("annotations", {})
        name = f"{registry}/{annotations[REF_NAME]}"
        annotations[CONTAINERD_NAME] = name
        names.append(name)
    return index, names


def _stream(layout: Path, index: dict, sink) -> None:
    data = json.dumps(index, sort_keys=True).encode()
    with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        tar.add(layout / "oci-layout", "oci-layout")
        info = tarfile.TarInfo("index.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        tar.add(layout / "blobs", "blobs")


def load_into(settings: Settings, node: NodePaths, layout: Path, registry: str) -> list[str]:
    """Import the layout into one node's containerd; returns the image names it now holds."""
    index, names = named_index(layout, registry)
    ctr = node_build.containerd_dir(settings) / "ctr"
    argv = [str(ctr), "--address", str(node.socket.resolve()), "--namespace", "k8s.io",
            "images", "import", "--no-unpack", "-"]  # fmt: skip
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=errors)  # fmt: skip
        try:
            _stream(layout, index, proc.stdin)
        finally:
            proc.stdin.close()
            proc.wait(timeout=300)
        errors.seek(0)
        if proc.returncode != 0:
            text = errors.read().decode(errors="replace")
            raise LoadError(f"{node.name}: ctr images import failed: {text}")
    return names


def load(layout: Path, registry: str = REGISTRY) -> dict[str, list[str]]:
    """Import into every real node of the running dev cluster: {node name: image names}."""
    settings = load_settings()
    nodes = load_node_settings()
    if not settings.real_nodes:
        raise LoadError("TRANCHE_REAL_NODES=0: the dev cluster has no real node to load into")
    done = {}
    for i in range(settings.real_nodes):
        node = node_paths(settings, nodes, i)
        if not node.socket.exists():
            raise LoadError(f"{node.name}: containerd not running ({node.socket}): make cluster-up")
        done[node.name] = load_into(settings, node, layout, registry)
    return done
