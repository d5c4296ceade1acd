"""The shipped core injected as the node's CDI edits inject it: the claim's config read-only at
/etc/tranche, its region at /var/run/tranche/region and the core named by a read-only
/etc/ld.so.preload, in a private mount namespace, with LD_PRELOAD unset. Nothing in the
process's environment names the core, its config or its region.

NATIVE_SHIPPED_CORE_UNDER_TEST names another build of libtranche.so (an older commit's, to
show that a test fails there)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.helpers.cdi_launch import launch_script
from tests.native.conftest import CONFIG_DIR, REGION_PARENT, Container, GpuBox


def preload_line(box: GpuBox) -> str:
    """/etc/ld.so.preload's content: the shipped core (after ASan's runtime in that build)."""
    other = os.environ.get("NATIVE_SHIPPED_CORE_UNDER_TEST")
    core = Path(other) if other and box.build.name == "normal" else box.build.lib
    return " ".join([*box.build.preload_prefix, str(core)])


def cdi_mounts(box: GpuBox, c: Container) -> list[dict]:
    """The mounts the CDI spec gives a container of this claim."""
    etc = c.config_path.parent / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "slice.conf").write_bytes(c.config_path.read_bytes())
    preload = c.config_path.parent / "ld.so.preload"
    preload.write_text(preload_line(box) + "\n")
    return [
        {"hostPath": str(etc), "containerPath": CONFIG_DIR, "options": ["ro", "bind"]},
        {"hostPath": str(c.region_dir), "containerPath": f"{REGION_PARENT}/region"},
        {"hostPath": str(preload), "containerPath": "/etc/ld.so.preload", "options": ["ro"]},
    ]


def start_injected(box: GpuBox, c: Container, command: list[str]) -> subprocess.Popen[str]:
    """command run in the claim's container mounts; its pid is the command's (each step execs)."""
    env = {k: v for k, v in c.env.items() if not k.startswith(("TRANCHE_", "LD_PRELOAD"))}
    script = launch_script(cdi_mounts(box, c), command)
    return subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
