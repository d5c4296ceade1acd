"""Pre-flight's context charge comes from the node agent's measurement, not a constant.

The agent's discovery runs on simgpu (a V100 whose CUDA context takes 300 MiB, as the agent
measured on the demo's GPUs) in its own process, its collector builds the status frame's GPU
list, and the portal's ingest stores it; pre-flight's context lint then charges 300 MiB (it
charged 512 MiB whatever the agent said). A GPU model no agent measured keeps the core's
charge for an unmeasured GPU, and says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from portal.agents import services
from portal.catalog.seed import ensure_catalogue
from portal.preflight.checks import run_checks
from portal.preflight.facts import Facts
from portal.preflight.manifest import parse_manifest
from portal.preflight.service import product_facts
from tests.helpers.gpus import v100
from tests.helpers.skips import NATIVE_BUILD, needs_native_sim
from tranche.agent_protocol import parse_status

REPO = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.django_db, needs_native_sim]
NODE = "ctx-node-0"
AGENT_GPUS = """
import json
from nodeagent.checkpoint import Checkpoint
from nodeagent.discovery import discover
from nodeagent.status import Collector
gpus = discover()
print(json.dumps(Collector("{node}", Checkpoint(Path("{state}") / "cp.json"), gpus).collect()[0]))
"""

MANIFEST = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: llm}
spec:
  selector: {matchLabels: {app: llm}}
  template:
    metadata:
      labels: {app: llm}
      annotations: {tranche.dev/model: "llama3.2:3b"}
    spec:
      resourceClaims: [{name: gpu, resourceClaimTemplateName: tranche-v100-8g}]
      containers:
      - name: llm
        image: ollama/ollama:0.24.0
        env: [{name: OLLAMA_CONTEXT_LENGTH, value: "131072"}]
        resources: {claims: [{name: gpu}]}
"""


def agent_gpu_report(tmp_path: Path, context_mib: int) -> list[dict]:
    """The GPU list the node agent sends, from its own discovery on simgpu."""
    gpu = v100(0)
    conf = tmp_path / "simgpu.conf"
    conf.write_text(
        f'device name="{gpu.name}" memory_mib=32768 cc=7.0 context_mib={context_mib} '
        f"uuid={gpu.uuid}\n"
    )
    env = {
        "PATH": os.environ["PATH"], "PYTHONPATH": str(REPO),
        "SIMGPU_CONFIG": str(conf), "SIMGPU_STATE": str(tmp_path / "simgpu.state"),
        "LD_LIBRARY_PATH": str(NATIVE_BUILD / "simgpu"),
    }  # fmt: skip
    code = "from pathlib import Path\n" + AGENT_GPUS.format(node=NODE, state=tmp_path)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
        check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def context_verdict():
    facts = Facts(objects=parse_manifest(MANIFEST), namespace="x", products=product_facts())
    [verdict] = [v for v in run_checks(facts) if v.check == "context_length"]
    return verdict


def test_the_context_charge_is_what_the_agent_measured(tmp_path) -> None:
    ensure_catalogue()
    before = context_verdict()
    assert before.figures["context_mib"] == 512
    assert "not yet measured on this GPU model" in before.reason

    gpus = agent_gpu_report(tmp_path, context_mib=300)
    assert gpus[0]["context_bytes"] == 300 * 2**20  # measured by the agent's discovery
    services.issue_node_token(NODE)
    frame = {
        "type": "status", "node": NODE, "seq": 1, "ts": time.time(), "full": True,
        "dropped": 0, "gpus": gpus, "pods": [], "removed": [],
    }  # fmt: skip
    services.record_status(NODE, parse_status(json.dumps(frame), None, NODE))

    after = context_verdict()
    assert after.figures["context_mib"] == 300
    assert after.figures["needed_mib"] == 2048 + 14336 + 300
    assert "300 MiB CUDA context (as node agents measured on a Tesla V100-PCIE-32GB)" in (
        after.reason
    )
