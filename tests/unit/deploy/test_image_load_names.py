"""deploy/images/node.py names every tag of the OCI layout under the registry the chart pulls
from, in containerd's own annotation (ctr ignores a bare tag), and refuses a missing layout."""

from __future__ import annotations

import json

import pytest

from deploy.images.node import CONTAINERD_NAME, REF_NAME, LoadError, named_index


def test_every_tag_is_named_under_the_registry(tmp_path) -> None:
    manifests = [
        {"digest": "sha256:a", "annotations": {REF_NAME: "tranche:0.1.0"}},
        {"digest": "sha256:a", "annotations": {REF_NAME: "tranche:0.1.0-abc"}},
        {"digest": "sha256:b", "annotations": {REF_NAME: "tranche-node-agent:0.1.0"}},
    ]
    (tmp_path / "index.json").write_text(json.dumps({"manifests": manifests}))
    index, names = named_index(tmp_path, "registry.tranche.dev/tranche")
    assert names == [
        "registry.tranche.dev/tranche/tranche:0.1.0",
        "registry.tranche.dev/tranche/tranche:0.1.0-abc",
        "registry.tranche.dev/tranche/tranche-node-agent:0.1.0",
    ]
    assert [m["annotations"][CONTAINERD_NAME] for m in index["manifests"]] == names
    # the layout on disk is left as it was
    on_disk = json.loads((tmp_path / "index.json").read_text())
    assert all(CONTAINERD_NAME not in m["annotations"] for m in on_disk["manifests"])


def test_a_missing_layout_says_what_to_run(tmp_path) -> None:
    with pytest.raises(LoadError, match="make images"):
        named_index(tmp_path / "nothing", "registry.tranche.dev/tranche")
