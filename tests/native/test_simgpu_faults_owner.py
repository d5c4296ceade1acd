"""Issue #45 finding 3: the simulated GPU's faults are the node's. A tenant's process (uid 1000,
as a tenant pod runs) cannot raise an XID or lose a GPU: the faults file is the node's own
(0644, written by simgpu-fault and the agent's NVML as root) and a pod gets it read-only (the CDI
spec's mount, tests/unit/nodeagent/test_cdi.py), yet the tenant's NVML still sees what the node
raised, as a real driver's device nodes let a process read the GPU's state but never forge the
kernel's faults. Run here on the host's filesystem as uid 1000 (setpriv), not in a pod: the real
node's pod test is the cluster tier's."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.helpers.skips import SIMGPU_DIR

TENANT_UID = 1000
pytestmark = [
    pytest.mark.skipif(
        not (SIMGPU_DIR / "simgpu-fault").exists(), reason="needs `make -C nodeagent/native`"
    ),
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("setpriv") is None,
        reason="needs root and setpriv(1) to run a process as the tenant's uid",
    ),
]


def _run(args: list[str], state: Path, *, tenant: bool) -> subprocess.CompletedProcess:
    env = {"SIMGPU_STATE": str(state), "LD_LIBRARY_PATH": str(SIMGPU_DIR), "PATH": "/usr/bin:/bin"}
    as_tenant = ["setpriv", f"--reuid={TENANT_UID}", f"--regid={TENANT_UID}", "--clear-groups"]
    return subprocess.run(
        [*(as_tenant if tenant else []), *args], env=env, capture_output=True, text=True,
        timeout=30, check=False,
    )  # fmt: skip


def _memory_column(state: Path) -> list[str]:
    smi = _run([str(SIMGPU_DIR / "nvidia-smi"), "--query-gpu=memory.total", "--format=csv"],
               state, tenant=True)  # fmt: skip
    assert smi.returncode == 0, smi.stderr
    return smi.stdout.splitlines()[1:]


def test_a_tenant_reads_the_nodes_faults_but_cannot_raise_one():
    folder = Path(tempfile.mkdtemp(prefix="simgpu-owner-"))
    try:
        folder.chmod(0o755)
        state = folder / "state"
        fault = str(SIMGPU_DIR / "simgpu-fault")
        assert _run([fault, "lose", "2"], state, tenant=False).returncode == 0  # the node
        state.chmod(0o666)  # the shared memory counters, as on the node (see docs/security.md)
        # The tenant cannot raise a fault, through simgpu's own tool or by writing the file...
        for forged in ([fault, "lose", "0"], [fault, "xid", "0", "79"]):
            run = _run(forged, state, tenant=True)
            assert (run.returncode, "faults are the node's to raise") == (1, run.stderr[-31:-1])
        faults = Path(f"{state}.faults")
        assert faults.stat().st_mode & 0o777 == 0o644
        assert faults.stat().st_uid == 0
        write = _run(["sh", "-c", f"printf x | dd of={faults} conv=notrunc"], state, tenant=True)
        assert write.returncode != 0
        assert "Permission denied" in write.stderr
        # ... yet its NVML sees the node's fault: GPU 2 is lost.
        assert _memory_column(state) == ["32768 MiB", "32768 MiB", "[N/A]", "32768 MiB"]
        assert _memory_column(state)[0] == "32768 MiB"  # GPU 0 still answers

        assert _run([fault, "recover", "2"], state, tenant=False).returncode == 0
        assert _memory_column(state)[2] == "32768 MiB"
    finally:
        shutil.rmtree(folder)
