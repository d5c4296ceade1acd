"""Shared by the backstop tests: simgpu for this process and the workloads.

simgpu reads SIMGPU_CONFIG/STATE once per process, and the collector under test loads
simgpu's libnvidia-ml into the pytest process, so every module that needs NVML here shares
one simulated machine for the session.
"""

from __future__ import annotations

import ctypes
import os

import pytest

from tests.helpers.gpus import v100
from tests.helpers.skips import NATIVE_BUILD


@pytest.fixture(scope="session")
def sim_nvml(tmp_path_factory):
    """simgpu for this process (NVML, read by the collector) and the workloads."""
    tmp = tmp_path_factory.mktemp("simgpu")
    gpu = v100(1)
    conf = tmp / "simgpu.conf"
    conf.write_text(
        f'device name="{gpu.name}" memory_mib=32768 context_mib=16 uuid={v100(0).uuid}\n'
        f'device name="{gpu.name}" memory_mib=32768 context_mib=16 uuid={gpu.uuid}\n'
    )
    env = {"SIMGPU_CONFIG": str(conf), "SIMGPU_STATE": str(tmp / "simgpu.state")}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    # As the agent does in simulation mode: pynvml's "libnvidia-ml.so.1" resolves to simgpu's.
    ctypes.CDLL(str(NATIVE_BUILD / "simgpu" / "libnvidia-ml.so.1"), mode=ctypes.RTLD_GLOBAL)
    yield {**env, "LD_LIBRARY_PATH": str(NATIVE_BUILD / "simgpu")}
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
