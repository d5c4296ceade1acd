"""Container memory limits for simulated pods, with the kernel's own memory cgroup (v1 or v2).

The kubelet puts each container in a memory cgroup whose limit is `resources.limits.memory`;
when the container's processes use more, the kernel's OOM killer kills one with SIGKILL and the
kubelet reports `OOMKilled`, exit code 137 (128 + 9). Kubelet-lite does the same: one cgroup
per pod under `tranche-sim/`, the workload joins it before it executes anything, and
`oom_killed()` reads the kernel's own count of OOM kills in it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PARENT = "tranche-sim"
OOM_EXIT_CODE = 137  # what the kubelet reports: 128 + SIGKILL


def version(root: Path = ROOT) -> int | None:
    """2 for the unified hierarchy with the memory controller, 1 for a v1 memory mount."""
    controllers = root / "cgroup.controllers"
    if controllers.exists() and "memory" in controllers.read_text().split():
        return 2
    if (root / "memory" / "memory.limit_in_bytes").exists():
        return 1
    return None


class MemoryCgroup:
    """One pod's memory cgroup: created with its limit, joined by the workload, removed after."""

    def __init__(self, name: str, limit_bytes: int, root: Path = ROOT) -> None:
        self.version = version(root)
        if self.version is None:
            raise RuntimeError(f"no memory cgroup controller under {root}")
        base = root / "memory" if self.version == 1 else root
        parent = base / PARENT
        parent.mkdir(exist_ok=True)
        if self.version == 2:  # children of tranche-sim may only limit memory if it delegates it
            (parent / "cgroup.subtree_control").write_text("+memory")
        self.path = parent / name
        self.path.mkdir(exist_ok=True)
        self.limit_bytes = limit_bytes
        if self.version == 1:
            (self.path / "memory.limit_in_bytes").write_text(str(limit_bytes))
            swap = self.path / "memory.memsw.limit_in_bytes"  # no swapping around the limit
            if swap.exists():
                swap.write_text(str(limit_bytes))
        else:
            (self.path / "memory.max").write_text(str(limit_bytes))
            swap = self.path / "memory.swap.max"
            if swap.exists():
                swap.write_text("0")

    @property
    def procs(self) -> Path:
        """Writing a pid here moves that process into the cgroup; its children stay in it."""
        return self.path / "cgroup.procs"

    def join(self, pid: int = 0) -> None:
        """Move `pid` (0: the calling process) into the cgroup."""
        self.procs.write_text(str(pid or os.getpid()))

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer killed in this cgroup."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        for line in (self.path / name).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def remove(self) -> None:
        """Remove the cgroup once its processes are gone (the kernel refuses it before)."""
        with contextlib.suppress(OSError):
            self.path.rmdir()
