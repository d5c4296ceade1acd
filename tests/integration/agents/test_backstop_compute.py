"""The backstop's compute half (issue #27): NVML's per-process utilisation per claim against the
share sold, on simgpu, with the real collector ticking as `nodeagent.agent` does.

Honest programs under the core at 25, 50 and 75 % (launching all the time: the core's meter
holds them to the share) are never touched over more than a window; a program that launches
around the core (the driver's cuLaunchKernel read from libcuda's symbol table: what issuing the
driver's ioctls amounts to on simgpu) takes the whole device on a 25 % claim and is stopped
within the window plus two ticks of starting.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from nodeagent import cdi, discovery
from nodeagent.compute_watch import DEFAULT_WINDOW_S, ComputeWatch
from nodeagent.draplugin.prepare import Layout, Preparer
from nodeagent.status import Collector
from tests.helpers.cdi_launch import apply_cdi, launch_script
from tests.helpers.gpus import NODE, allocated_claim, v100
from tests.helpers.skips import NATIVE_BUILD, needs_native_sim
from tests.helpers.ticking import collector_ticking

REPO = Path(__file__).resolve().parents[3]
INTERVAL = 0.5  # the agent's tick here
WINDOW = DEFAULT_WINDOW_S  # the agent's default compute window
LOOKUPS = NATIVE_BUILD / "tests" / "lookups"
pytestmark = [needs_native_sim, pytest.mark.skipif(not LOOKUPS.exists(), reason="make native")]


class Node:
    """Claims prepared by the plugin on the two simulated GPUs, and their containers."""

    def __init__(self, sim: dict) -> None:
        self.state = Path(tempfile.mkdtemp(prefix="tr-compute-"))
        self.sim = sim
        self.claims: dict[str, dict] = {}
        layout = Layout(
            self.state, self.state / "cdi", NATIVE_BUILD / "libtranche.so", simulate=True
        )
        self.preparer = Preparer(NODE, [v100(0), v100(1)], layout, self._claim)
        self.layout = layout
        self.procs: list[subprocess.Popen[str]] = []
        self.samples: dict[int, list[float]] = {}  # pid -> NVML utilisation seen each tick

    def _claim(self, namespace: str, name: str) -> dict:
        return self.claims[name]

    def container(
        self, name: str, uid: str, gpu: int, percent: int, pod_uid: str = ""
    ) -> tuple[dict, list]:
        """Prepare a claim of `percent` % of GPU `gpu` (1 GiB); its container's env and mounts.
        `pod_uid`: the pod reserving it (a UUID its cgroup can name), else one no cgroup does."""
        self.claims[name] = allocated_claim(
            uid, device=f"gpu-{gpu}", memory="1Gi", cores=str(percent),
            pod_uid=pod_uid or f"pod-{name}",
        )  # fmt: skip
        self.claims[name]["metadata"]["name"] = name
        prepared = self.preparer.prepare("acme-ml", name, uid)
        spec = json.loads(cdi.spec_path(self.layout.cdi_dir, uid).read_text())
        env, mounts = apply_cdi(spec, [d.cdi_id.split("=", 1)[1] for d in prepared.devices])
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), **self.sim, **env}
        return env, mounts

    def start(self, env: dict, mounts: list, command: list[str], ready: str) -> tuple:
        proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             launch_script(mounts, command)],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True,
        )  # fmt: skip
        self.procs.append(proc)
        for line in proc.stdout:
            if ready in line:
                return proc, time.monotonic()
            if line.startswith("FAIL"):
                break
        raise AssertionError(f"{command} did not start: {line!r}")

    def honest(self, name: str, uid: str, gpu: int, percent: int) -> subprocess.Popen[str]:
        """The workload under the core, launching 100 % of the time it is let."""
        env, mounts = self.container(name, uid, gpu, percent)
        cmd = [sys.executable, "-m", "nodeagent.sim.workload", "--memory-gib", "0.25",
               "--duty", "1", "--seconds", "60"]  # fmt: skip
        return self.start(env, mounts, cmd, '"running"')[0]

    @contextmanager
    def agent_ticking(self, window_s: float = WINDOW) -> Iterator[Collector]:
        collector = Collector(
            NODE, self.preparer.checkpoint, [v100(0), v100(1)],
            nvml_process_memory=discovery.process_memory,
            nvml_process_utilisation=self._utilisation,
            compute=ComputeWatch(window_s=window_s), kill_offenders=True,
        )  # fmt: skip
        with collector_ticking(collector, INTERVAL):
            yield collector

    def _utilisation(self, uuid: str) -> dict[int, float]:
        seen = discovery.process_utilisation(uuid)
        for pid, pct in seen.items():
            self.samples.setdefault(pid, []).append(pct)
        return seen

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            proc.stdout.close()
        for claim in self.claims.values():
            self.preparer.unprepare(claim["metadata"]["uid"])
        shutil.rmtree(self.state, ignore_errors=True)


@pytest.fixture
def node(sim_nvml: dict) -> Iterator[Node]:
    n = Node(sim_nvml)
    yield n
    n.close()


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


@pytest.mark.parametrize("pair", [(25, 75), (50, None)], ids=["25-and-75", "50"])
def test_honest_programs_at_their_share_are_never_stopped(node: Node, pair) -> None:
    procs = {}
    for gpu, pct in enumerate(pair):
        if pct is not None:
            uid = f"c0a1e000-0000-4000-8000-0000000000{pct:02d}"
            procs[pct] = node.honest(f"honest-{pct}", uid, gpu, pct)
    with node.agent_ticking() as collector:
        time.sleep(WINDOW + 4 * INTERVAL)  # a full window and then some, every tick judged
        findings = collector.take_findings()
    for pct, proc in procs.items():
        assert proc.poll() is None, f"the {pct} % program was stopped: {findings}"
        # It really ran at its share all along (NVML's view, the core's meter holding it).
        seen = _mean(node.samples.get(proc.pid, [])[2:])
        print(f"honest {pct} %: NVML mean {seen:.1f} %")  # noqa: T201
        assert pct - 8 <= seen <= pct + 5, (pct, node.samples.get(proc.pid))
    assert not [f for f in findings if f["kind"] == "backstop-stopped"], findings


def test_a_program_launching_around_the_core_is_stopped_within_the_window(node: Node) -> None:
    env, mounts = node.container("evader", "e7a0e000-0000-4000-8000-000000000025", 1, 25)
    with node.agent_ticking() as collector:
        proc, running_at = node.start(env, mounts, [str(LOOKUPS), "spin", "60"], "running")
        deadline = running_at + WINDOW + 6 * INTERVAL
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        gone = time.monotonic() - running_at
        findings = collector.take_findings()
    assert proc.returncode == -signal.SIGKILL, f"not stopped after {gone:.1f} s"
    print(f"evader at 100 % on a 25 % claim: stopped {gone:.2f} s after it ran")  # noqa: T201
    assert gone <= WINDOW + 2 * INTERVAL
    stopped = [f for f in findings if f["kind"] == "backstop-stopped"]
    assert stopped, findings
    assert "its share 25 %" in stopped[0]["detail"], findings
    assert _mean(node.samples.get(proc.pid, [])[1:]) > 25 + 2 * 10  # far over its share
