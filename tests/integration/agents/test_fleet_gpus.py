"""The fleet publisher builds each node's GPUs without simgpu (`simulated_gpus`); they must be
the GPUs a per-node simulated agent discovers through NVML on simgpu, field for field (the
context footprint aside, which only preparing a claim measures), for every catalogue model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from nodeagent.sim.gpus import SIM_MODELS, simulated_gpus
from nodeagent.slices import render_resource_slice, spec_digest
from tests.helpers.skips import SIMGPU_DIR, needs_native_sim

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [needs_native_sim]

DISCOVER = """
import json, sys
from dataclasses import asdict
from pathlib import Path
from nodeagent import discovery
from nodeagent.sim.gpus import simulate_node_gpus
node, state, simgpu, count, model = sys.argv[1:]
simulate_node_gpus(node, Path(state), Path(simgpu), int(count), model)
print(json.dumps([asdict(g) for g in discovery.discover()]))
"""


@pytest.mark.parametrize("model", sorted(SIM_MODELS))
def test_fleet_gpus_are_what_the_simulated_agent_discovers(model, tmp_path):
    node = "kwok-fleet-3"
    done = subprocess.run(
        [sys.executable, "-c", DISCOVER, node, str(tmp_path), str(SIMGPU_DIR), "8", model],
        env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT,
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    discovered = json.loads(done.stdout.splitlines()[-1])
    built = simulated_gpus(node, 8, model)
    for found in discovered:
        found["context_bytes"] = 0
    assert discovered == [asdict(g) for g in built]
    # hence the same slice, byte for byte, as the per-node agent publishes
    assert spec_digest(render_resource_slice(node, built, 1)) == spec_digest(
        render_resource_slice(node, [type(built[0])(**g) for g in discovered], 1)
    )
