"""Simulated GPUs for kwok nodes: simgpu configured with node-unique UUIDs, and the same GPUs
described purely (no simgpu loaded) for the fleet publisher.

One table (`SIM_MODELS`) says what each simulated model is (memory, SMs, compute capability);
`simulate_node_gpus` writes it into simgpu's config for one agent, `simulated_gpus` turns it
into the `GpuInfo`s discovery would read from that config, so a node published by the fleet
publisher carries exactly the devices its own simulated agent would publish.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from nodeagent.discovery import ARCH_BY_CC_MAJOR, GpuInfo


@dataclass(frozen=True)
class SimModel:
    """One simulated GPU model as simgpu plays it."""

    memory_mib: int
    sm_count: int
    compute_capability: str  # "major.minor"


# The catalogue's models (portal/catalog/seed.py); any other name simulates a V100's figures.
SIM_MODELS: dict[str, SimModel] = {
    "Tesla V100-PCIE-32GB": SimModel(32768, 80, "7.0"),
    "Tesla V100-SXM2-32GB": SimModel(32768, 80, "7.0"),
    "NVIDIA A100-SXM4-40GB": SimModel(40960, 108, "8.0"),
}
DEFAULT_SIM_MODEL = SimModel(32768, 80, "7.0")
# What simgpu's NVML answers for the whole system (nodeagent/native/simgpu: SIM_DRIVER_VERSION,
# nvmlSystemGetCudaDriverVersion 12090); discovery reads these on a simulated node.
SIM_DRIVER_VERSION = "550.00-simgpu (SIMULATED)"
SIM_CUDA_VERSION = "12.9"


def sim_uuid(node: str, index: int) -> str:
    """The UUID of GPU `index` of `node`: unique per node name (UUIDs are published
    cluster-wide) and stable across restarts."""
    tag = int.from_bytes(hashlib.sha256(node.encode()).digest()[:4], "big")
    return f"GPU-{tag:08x}-0000-4000-8000-{index:012x}"


def model_of(name: str) -> SimModel:
    return SIM_MODELS.get(name, DEFAULT_SIM_MODEL)


def simulated_gpus(node: str, count: int, model: str) -> list[GpuInfo]:
    """The `GpuInfo`s discovery reads on `node` simulated with `count` GPUs of `model` (pure;
    simgpu answers no architecture query, so it comes from the compute capability as there).
    The context footprint stays unknown (0): only preparing a claim needs it."""
    m = model_of(model)
    major = int(m.compute_capability.split(".")[0])
    return [
        GpuInfo(
            index=i,
            minor=i,
            name=model,
            uuid=sim_uuid(node, i),
            memory_bytes=m.memory_mib * 1024**2,
            compute_capability=m.compute_capability,
            architecture=ARCH_BY_CC_MAJOR.get(major, "Unknown"),
            driver_version=SIM_DRIVER_VERSION,
            cuda_version=SIM_CUDA_VERSION,
            sm_count=m.sm_count,
            mig_enabled=False,
        )
        for i in range(count)
    ]


def simgpu_config(node: str, count: int, model: str) -> str:
    """simgpu's config text for `node`: one line per GPU (nodeagent/native/simgpu/simstate.c)."""
    m = model_of(model)
    return "".join(
        f'device name="{model}" memory_mib={m.memory_mib} sm_count={m.sm_count} '
        f"cc={m.compute_capability} uuid={sim_uuid(node, i)}\n"
        for i in range(count)
    )


def simulate_node_gpus(
    node: str, state_dir: Path, simgpu_dir: Path, count: int, model: str
) -> dict[str, str]:
    """Point NVML/CUDA at simgpu (its libraries in `simgpu_dir`) with `count` GPUs of `model`
    whose UUIDs are unique per node; returns the environment workloads get."""
    state_dir.mkdir(parents=True, exist_ok=True)
    config = state_dir / "simgpu.conf"
    config.write_text(simgpu_config(node, count, model))
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
