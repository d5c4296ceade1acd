"""A node agent's own CPU, as bench/scale.py and bench/scalekit/fleetpub.py measure it.

- `agent_argv(node, state, kubeconfig, port)`: the agent's command line, as the demo starts it;
- `measure_agent_cpu(pid, seconds)`: the agent process's own CPU (utime + stime of the process,
  all its threads, not its children) over `seconds`, and its RSS.

The standalone run that measured the agent at a full node (8 GPUs, 32 running containers under
the core, 0.55 % of one core) ran those containers with kubelet-lite, retired with issue #25:
containers now run only on the dev cluster's real nodes (4 GPUs each), where that figure is yet
to be measured again.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

GPUS = 8
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """utime + stime of the process (every thread), children excluded (/proc/<pid>/stat)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": state is field 3
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure_agent_cpu(pid: int, seconds: float) -> dict:
    """The process's own CPU over `seconds` of wall time: {"cpu_percent" (of one core),
    "cpu_seconds", "rss_mib" (at the end), "seconds"}."""
    cpu0, t0 = _cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    cpu1, t1 = _cpu_seconds(pid), time.monotonic()
    used = cpu1 - cpu0
    return {
        "cpu_percent": round(100 * used / (t1 - t0), 3),
        "cpu_seconds": round(used, 3),
        "rss_mib": round(_rss_mib(pid), 1),
        "seconds": round(t1 - t0, 2),
    }


def agent_argv(node: str, state: Path, kubeconfig: Path, port: int | None) -> list[str]:
    """`python -m nodeagent run --simulate --sim-gpus 8` for `node` as deploy/local/agents.py
    starts it; `port`: the portal's, whose token for `node` must be in
    `<state>/agents/<node>.token`; None: no status stream. Its home (claims, CDI) is
    `<state>/agents/<node>`."""
    from deploy.local.agents import argv

    return argv(node, 0, state, kubeconfig, port, gpus=GPUS)
