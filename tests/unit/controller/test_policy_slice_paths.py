"""The pod policy protects every path the node agent's CDI spec mounts into a container."""

from __future__ import annotations

from controller.render.policies.pod_hardening import SLICE_PATHS
from nodeagent.cdi import ClaimFiles, render_cdi_spec


def test_every_cdi_mount_lies_at_or_under_a_protected_path() -> None:
    files = ClaimFiles("/h/core.so", "/h/ld.so.preload", "/h/slice.conf", "/h/region")
    mounts = render_cdi_spec("uid", [], files)["containerEdits"]["mounts"]
    for mount in mounts:
        path = mount["containerPath"]
        assert any(path == p or path.startswith(p + "/") for p in SLICE_PATHS), path
