"""The install tier: the chart installed once per session on the dev cluster's real node.

Needs the images (`make images`) and the local cluster with a real node; `make test-install`
runs it (not part of `make test`: docs/install.md, "The install tier"). The release is left
installed at the end only if TRANCHE_KEEP_INSTALL=1 (to look at it); otherwise uninstalled.
TRANCHE_REUSE_INSTALL=1 (while writing tests) keeps a release that is already up instead of
installing afresh; the install's own figures and checks then fail, saying so.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from tests.install.installation import LAYOUT, Installation, portal_port, real_node_paths, version


@pytest.fixture(scope="session")
def installation(kube_cluster) -> Iterator[Installation]:
    if os.environ.get("KUBECONFIG"):
        pytest.skip("the install tier uses the local dev cluster's real node (KUBECONFIG is set)")
    if not (LAYOUT / "index.json").is_file():
        pytest.fail(f"no images in {LAYOUT}: run `make images` first", pytrace=False)
    inst = Installation(kube_cluster, real_node_paths(), portal_port())
    if not (os.environ.get("TRANCHE_REUSE_INSTALL") == "1" and inst.up()):
        inst.install(version())
    report = LAYOUT.parent / "images.json"
    if report.is_file():  # what `make images` measured, beside what the install took
        for image, facts in json.loads(report.read_text()).items():
            print(f"\n{image}: {facts['compressed_mb']:.1f} MB compressed, "  # noqa: T201
                  f"{facts['uncompressed_mb']:.1f} MB unpacked ({facts['ref']})")  # fmt: skip
    figures = ", ".join(f"{k} {v:.1f}" for k, v in inst.timings.items())
    print(f"\ninstall timings (s): {figures}")  # noqa: T201
    try:
        yield inst
    finally:
        if os.environ.get("TRANCHE_KEEP_INSTALL") != "1":
            inst.remove()
