"""simgpu's NVML events and SIMULATED faults, through pynvml as the agent calls them.

A child process loads simgpu's libnvidia-ml (never this test process: other tests load their
own), registers every GPU for XID and ECC events, and meets what `simgpu-fault` raises: the
events in order on the GPU they were raised on, NVML_ERROR_TIMEOUT when there is none, a lost
GPU answering NVML_ERROR_GPU_IS_LOST until it recovers, the driver's kernel log line naming
the process of an XID.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.skips import SIMGPU_DIR

pytestmark = pytest.mark.skipif(
    not (SIMGPU_DIR / "simgpu-fault").exists(), reason="needs `make -C nodeagent/native`"
)

CHILD = textwrap.dedent(
    """
    import ctypes, json, subprocess, sys
    ctypes.CDLL(sys.argv[1] + "/libnvidia-ml.so.1", mode=ctypes.RTLD_GLOBAL)
    import pynvml
    fault = lambda *a: subprocess.run([sys.argv[1] + "/simgpu-fault", *map(str, a)], check=True)
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(4)]
    addr = {ctypes.cast(h, ctypes.c_void_p).value: i for i, h in enumerate(handles)}
    fault("xid", 0, 48)  # before the set exists: not delivered
    es = pynvml.nvmlEventSetCreate()
    out = {"supported": pynvml.nvmlDeviceGetSupportedEventTypes(handles[0])}
    for h in handles[:3]:  # GPU 3 is not registered: its events are not delivered
        pynvml.nvmlDeviceRegisterEvents(h, 0x8 | 0x1 | 0x2, es)
    try:
        pynvml.nvmlDeviceRegisterEvents(handles[3], 0x4, es)  # PState: simgpu has none
    except pynvml.NVMLError_NotSupported:
        out["pstate"] = "not supported"
    fault("xid", 3, 31)
    fault("xid", 1, 13, 4242, "python")
    fault("ecc", 2, "double")
    fault("xid", 2, 79)
    events = []
    while True:
        try:
            e = pynvml.nvmlEventSetWait_v2(es, 100)
        except pynvml.NVMLError_Timeout:
            break
        events.append([addr[ctypes.cast(e.device, ctypes.c_void_p).value], e.eventType,
                       e.eventData, e.gpuInstanceId])
    out["events"] = events
    try:
        pynvml.nvmlDeviceGetMemoryInfo(handles[2])
        out["lost"] = "answers"
    except pynvml.NVMLError_GpuIsLost:
        out["lost"] = "GPU is lost"
    fault("recover", 2)
    out["recovered"] = pynvml.nvmlDeviceGetMemoryInfo(handles[2]).total
    out["bus"] = pynvml.nvmlDeviceGetPciInfo(handles[1]).bus
    pynvml.nvmlEventSetFree(es)
    print(json.dumps(out))
    """
)


def test_events_faults_and_recovery(tmp_path):
    env = dict(os.environ, SIMGPU_STATE=str(tmp_path / "state"))
    env.pop("SIMGPU_CONFIG", None)  # simgpu's default: 4 V100s
    run = subprocess.run(
        [sys.executable, "-c", CHILD, str(SIMGPU_DIR)], env=env, capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["supported"] == 0x8 | 0x1 | 0x2
    assert out["pstate"] == "not supported"
    assert out["events"] == [
        [1, 0x8, 13, 0xFFFFFFFF],
        [2, 0x2, 0, 0xFFFFFFFF],
        [2, 0x8, 79, 0xFFFFFFFF],
    ]
    assert out["lost"] == "GPU is lost"  # XID 79: fallen off the bus
    assert out["recovered"] == 32768 << 20
    log = (tmp_path / "state.kmsg").read_text().splitlines()
    assert f"NVRM: Xid (PCI:0000:{out['bus']:02x}:00): 13, pid=4242, name=python," in log[2]
    assert "pid='<unknown>'" in log[-1]
    assert all("SIMULATED" in line for line in log)
