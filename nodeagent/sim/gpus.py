"""Simulated GPUs for an agent on a kwok node: simgpu configured with node-unique UUIDs."""

from __future__ import annotations

import ctypes
import hashlib
import os
from pathlib import Path


def simulate_node_gpus(
    node: str, state_dir: Path, simgpu_dir: Path, count: int, model: str
) -> dict[str, str]:
    """Point NVML/CUDA at simgpu (its libraries in `simgpu_dir`) with `count` GPUs of `model`
    whose UUIDs are unique per node; returns the environment workloads get."""
    state_dir.mkdir(parents=True, exist_ok=True)
    config = state_dir / "simgpu.conf"
    # Unique per node name (UUIDs are published cluster-wide), stable across restarts.
    tag = int.from_bytes(hashlib.sha256(node.encode()).digest()[:4], "big")
    lines = [
        f'device name="{model}" memory_mib=32768 sm_count=80 cc=7.0 '
        f"uuid=GPU-{tag:08x}-0000-4000-8000-{i:012x}"
        for i in range(count)
    ]
    config.write_text("\n".join(lines) + "\n")
    env = {
        "SIMGPU_CONFIG": str(config),
        "SIMGPU_STATE": str(state_dir / "simgpu.state"),
        "LD_LIBRARY_PATH": str(simgpu_dir),
    }
    os.environ.update({k: v for k, v in env.items() if k.startswith("SIMGPU")})
    # pynvml dlopens "libnvidia-ml.so.1"; loading simgpu's first makes that name resolve to it.
    ctypes.CDLL(str(simgpu_dir / "libnvidia-ml.so.1"), mode=ctypes.RTLD_GLOBAL)
    # Likewise libcuda.so.1, which discovery uses to measure a context's footprint.
    ctypes.CDLL(str(simgpu_dir / "libcuda.so.1"), mode=ctypes.RTLD_GLOBAL)
    return env
