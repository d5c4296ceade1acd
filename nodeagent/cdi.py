"""Pure rendering of the CDI spec for one prepared claim, plus the file write.

The spec's container edits make the GPU visible, mount the interception core and its slice
config read-only, mount a one-line `/etc/ld.so.preload` naming the core (so the dynamic loader
loads it before anything else, even in programs that scrub LD_PRELOAD), and mount the claim's
shared-region folder read-write. Edits shared by every device of the claim sit at spec level;
per-GPU edits (device nodes, UUID) sit on each device.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tranche.names import ANNOTATION_CLAIM_UID, CDI_VENDOR

# Paths inside the container; the shipped core reads the config and region at exactly these
# paths and takes no override from the environment (nodeagent/native/src/config.h).
from tranche.slice_paths import (
    CONFIG_IN_CONTAINER,
    CORE_IN_CONTAINER,
    PRELOAD_IN_CONTAINER,
    REGION_IN_CONTAINER,
)

CDI_VERSION = "1.1.0"  # specs-go v1.1.1 CurrentVersion
CDI_CLASS = "gpu"
CDI_KIND = f"{CDI_VENDOR}/{CDI_CLASS}"


@dataclass(frozen=True)
class CdiDevice:
    """One GPU share of a claim as CDI sees it."""

    name: str  # CDI device name, unique within the spec
    uuid: str
    minor: int | None  # /dev/nvidia<minor>; None on the simulated GPU (no device node)
    index: int = 0  # the GPU's index on the node (simgpu's device file is named after it)


# Where the simulated driver appears in a container: simgpu plays the NVIDIA driver, so its
# libraries and nvidia-smi sit where the NVIDIA Container Toolkit puts the real ones.
SIM_LIB_DIR = "/usr/lib/x86_64-linux-gnu"
SIM_SMI = "/usr/bin/nvidia-smi"
SIM_CONFIG = "/etc/simgpu/simgpu.conf"
SIM_STATE = "/var/run/simgpu/state"
# The simulated faults (XIDs, lost GPUs): the node's, read-only in a container, as a real
# driver's faults are the kernel's (simstate.h: "$SIMGPU_STATE.faults").
SIM_FAULTS = SIM_STATE + ".faults"
SIM_DEVICE_DIR = "/dev/simgpu"  # simgpu lists only the devices with a file here (simstate.h)


@dataclass(frozen=True)
class SimDriver:
    """Host paths of the simulated driver (simulation mode only) and the claim's device folder
    (one file `simgpu<index>` per allocated GPU, mounted read-only at SIM_DEVICE_DIR)."""

    lib_dir: str  # libcuda.so.1, libnvidia-ml.so.1, nvidia-smi
    config: str
    state: str
    device_dir: str

    @property
    def faults(self) -> str:
        """The node's faults file beside the state (simgpu's default name for it)."""
        return self.state + ".faults"


def _sim_edits(sim: SimDriver) -> tuple[list[dict], list[str]]:
    mounts = [
        _ro(f"{sim.lib_dir}/libcuda.so.1", f"{SIM_LIB_DIR}/libcuda.so.1"),
        _ro(f"{sim.lib_dir}/libnvidia-ml.so.1", f"{SIM_LIB_DIR}/libnvidia-ml.so.1"),
        _ro(f"{sim.lib_dir}/nvidia-smi", SIM_SMI),
        _ro(sim.config, SIM_CONFIG),
        _ro(sim.device_dir, SIM_DEVICE_DIR),
        # The faults a tenant's NVML reads but cannot raise: read-only, like the kernel's.
        _ro(sim.faults, SIM_FAULTS),
        # The simulated device memory every process on the node shares, as the driver's.
        {"hostPath": sim.state, "containerPath": SIM_STATE, "type": "bind",
         "options": ["rw", "nosuid", "nodev", "noexec", "bind"]},
    ]  # fmt: skip
    return mounts, [f"SIMGPU_CONFIG={SIM_CONFIG}", f"SIMGPU_STATE={SIM_STATE}"]


@dataclass(frozen=True)
class ClaimFiles:
    """Host paths the spec mounts for one claim."""

    core_library: str
    preload_file: str
    config_file: str
    region_dir: str


def cdi_device_id(device_name: str) -> str:
    """Fully qualified CDI device id, as returned to the kubelet."""
    return f"{CDI_KIND}={device_name}"


def _ro(host: str, container: str) -> dict:
    return {
        "hostPath": host,
        "containerPath": container,
        "type": "bind",
        "options": ["ro", "nosuid", "nodev", "bind"],
    }


def render_cdi_spec(
    claim_uid: str, devices: Sequence[CdiDevice], files: ClaimFiles, sim: SimDriver | None = None
) -> dict:
    """The CDI spec (a dict ready for JSON) for one claim; pure and deterministic. `sim` adds
    the simulated driver (its libraries, nvidia-smi, config, state and the claim's devices)."""
    per_device = []
    for d in devices:
        edits: dict = {"env": [f"TRANCHE_GPU_UUID_{d.name.rsplit('-', 1)[-1]}={d.uuid}"]}
        if d.minor is not None:
            edits["deviceNodes"] = [{"path": f"/dev/nvidia{d.minor}"}]
        per_device.append({"name": d.name, "containerEdits": edits})
    visible = ",".join(d.uuid for d in devices)
    common_nodes = (
        [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}]
        if any(d.minor is not None for d in devices)
        else []
    )
    container_edits: dict = {
        "env": [
            f"NVIDIA_VISIBLE_DEVICES={visible}",
            f"TRANCHE_CLAIM_UID={claim_uid}",
        ],
        "mounts": [
            _ro(files.core_library, CORE_IN_CONTAINER),
            _ro(files.preload_file, PRELOAD_IN_CONTAINER),
            _ro(files.config_file, CONFIG_IN_CONTAINER),
            {
                "hostPath": files.region_dir,
                "containerPath": REGION_IN_CONTAINER,
                "type": "bind",
                "options": ["rw", "nosuid", "nodev", "noexec", "bind"],
            },
        ],
    }
    if common_nodes:
        container_edits["deviceNodes"] = common_nodes
    if sim is not None:
        mounts, env = _sim_edits(sim)
        container_edits["mounts"] += mounts
        container_edits["env"] += env
    return {
        "cdiVersion": CDI_VERSION,
        "kind": CDI_KIND,
        "annotations": {ANNOTATION_CLAIM_UID: claim_uid},
        "devices": per_device,
        "containerEdits": container_edits,
    }


def spec_path(cdi_dir: Path, claim_uid: str) -> Path:
    """One spec file per claim, named so CDI's vendor/class prefix is visible."""
    return cdi_dir / f"{CDI_VENDOR}-{CDI_CLASS}_{claim_uid}.json"


def write_spec(path: Path, spec: dict) -> None:
    """Atomic write, mode 0644: runtimes read it, only root writes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(spec, indent=2, sort_keys=True))
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def preload_line(core_in_container: str = CORE_IN_CONTAINER) -> str:
    """The content of the mounted /etc/ld.so.preload."""
    return core_in_container + "\n"
