"""Agent to portal without Kubernetes: a claim prepared by the plugin, its workload run under
the real interception core on simgpu with the CDI edits applied (mounted /etc/ld.so.preload in
a private mount namespace), the agent's collector and status stream, and the portal served by a
real daphne on a free port with Redis and PostgreSQL. The workload asks for 10 GiB on an 8 GiB
slice; the portal must show the 8 GiB limit, the used memory and the rejection within 3 s."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from django.db import connection

from nodeagent import cdi
from nodeagent.draplugin.prepare import Layout, Preparer
from nodeagent.status import Collector
from nodeagent.stream import StatusStream
from portal.agents import selectors, services
from portal.tenants.models import Organization, Project
from tests.helpers.cdi_launch import apply_cdi, launch_script
from tests.helpers.gpus import NODE, allocated_claim, v100
from tests.helpers.observed import bind_pods
from tests.helpers.portal import serve_portal
from tests.helpers.skips import NATIVE_BUILD, needs_native_sim

REPO = Path(__file__).resolve().parents[3]
GIB = 1024**3
UID = "e2e0c1a1-0000-4000-8000-000000000001"
pytestmark = [
    pytest.mark.django_db(transaction=True),
    needs_native_sim,
]


def _pod_row():
    """Read from a worker thread, then close that thread's connection (it would otherwise
    outlive the test and block dropping the test database)."""
    from django.db import connections

    try:
        return selectors.pod_status("acme-ml", "pod-a")
    finally:
        connections.close_all()


@pytest.fixture
def portal_url():
    with serve_portal(connection.settings_dict["NAME"]) as portal:
        yield portal.url


@pytest.fixture
def sim(tmp_path):
    gpu = v100(1)
    conf = tmp_path / "simgpu.conf"
    conf.write_text(f'device name="{gpu.name}" memory_mib=32768 uuid={v100(0).uuid}\n'
                    f'device name="{gpu.name}" memory_mib=32768 uuid={gpu.uuid}\n')  # fmt: skip
    return {
        "SIMGPU_CONFIG": str(conf),
        "SIMGPU_STATE": str(tmp_path / "simgpu.state"),
        "LD_LIBRARY_PATH": str(NATIVE_BUILD / "simgpu"),
    }


def test_rejected_allocation_reaches_the_portal_within_3s(portal_url, sim, tmp_path):
    org = Organization.objects.create(name="Acme", slug="acme")
    project = Project.objects.create(organization=org, name="ML", slug="ml", namespace="acme-ml")
    # Play the watcher: the cluster bound pod-a to this node (the portal checks it).
    bind_pods(project.id, {"pod-a": {"phase": "Running", "reason": "", "node": NODE}})
    token = services.issue_node_token(NODE)
    state = Path(tempfile.mkdtemp(prefix="tr-e2e-"))
    layout = Layout(state, state / "cdi", NATIVE_BUILD / "libtranche.so", simulate=True)
    claims = {("acme-ml", "pod-a-gpu-x7k2"): allocated_claim(UID)}
    preparer = Preparer(NODE, [v100(0), v100(1)], layout, lambda ns, n: claims[(ns, n)])
    prepared = preparer.prepare("acme-ml", "pod-a-gpu-x7k2", UID)
    spec = json.loads(cdi.spec_path(layout.cdi_dir, UID).read_text())
    env, mounts = apply_cdi(spec, [d.cdi_id.split("=", 1)[1] for d in prepared.devices])
    script = launch_script(
        mounts,
        [sys.executable, "-m", "nodeagent.sim.workload", "--memory-gib", "10", "--seconds", "20"],
    )
    workload = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), **sim, **env},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    events: list[dict] = []
    oom_at = None
    try:
        for line in workload.stdout:
            events.append(json.loads(line) if line.startswith("{") else {"raw": line})
            if events[-1].get("result") == "CUDA_ERROR_OUT_OF_MEMORY":
                oom_at = time.monotonic()
            if events[-1].get("event") == "running" or "raw" in events[-1]:
                break
        assert oom_at, f"the core never refused an allocation: {events}"

        collector = Collector(NODE, preparer.checkpoint, [v100(0), v100(1)])
        stream = StatusStream(portal_url, NODE, token)

        async def agent() -> float:
            stop = asyncio.Event()
            runner = asyncio.create_task(stream.run(stop))
            try:
                deadline = time.monotonic() + 3
                while time.monotonic() < deadline:
                    gpus, pods = collector.collect()
                    stream.offer(gpus, pods)
                    row = await asyncio.to_thread(_pod_row)
                    if row and row.rejected_allocations >= 1:
                        return time.monotonic() - oom_at
                    await asyncio.sleep(0.2)
                raise AssertionError(f"portal state after 3 s: {row and row.__dict__}")
            finally:
                stop.set()
                await runner

        latency = asyncio.run(agent())
    finally:
        os.killpg(workload.pid, 15)
        workload.wait(timeout=10)
        preparer.unprepare(UID)
        shutil.rmtree(state, ignore_errors=True)
    row = selectors.pod_status("acme-ml", "pod-a")
    assert row.memory_limit_bytes == 8 * GIB
    assert 6 * GIB < row.memory_used_bytes <= 8 * GIB
    assert row.rejected_allocations == 1
    assert row.compute_target_percent == 25
    assert latency < 3, latency
    print(f"rejection to portal state: {latency:.2f}s")  # noqa: T201
