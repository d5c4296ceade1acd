"""The node agent's CPU with metrics on at 32 containers (issue #33 goal: <= 1 % of a core).

Runs the agent's collector over 32 slices of one simulated V100, each a container with one
process under the interception core (`burn`, 10 ms kernels at a 3 % share), as
`tests/helpers/slice_agent.py` does, every second: regions read, dead slots reclaimed, NVML's
per-process memory and utilisation cross-checked (both backstops, as the agent runs them), the
GPU health monitor's thread, and the status frame built and encoded (not sent: no portal).
Twice, alternating, with /metrics on (served, and scraped every second: 15 to 30 times more
often than a Prometheus usually does; `--scrape-every 15` for a usual interval) and off, and
reports the agent process's own CPU time (utime + stime from /proc, children excluded) over
each run's measured window, as a percentage of one core, with the main thread's (the tick)
apart from the other threads' (health monitor, /metrics server); the difference is what
metrics cost. Not in either run: the DRA plugin (idle between claims), publishing the pool
(an API call every 10 s) and sending the frame on the websocket.

    .venv/bin/python bench/agent_metrics_cpu.py [--rounds 3] [--seconds 40] [--containers 32]
        [--scrape-every 1]

Figures are printed and written to bench/results/agent_metrics_cpu_scrape<N>s.{txt,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
WARMUP = 10.0  # seconds before the measured window: workloads started, first launches timed
TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int, task: int | None = None) -> float:
    """utime + stime of process `pid` (all threads), or of its thread `task` alone."""
    where = f"/proc/{pid}" if task is None else f"/proc/{pid}/task/{task}"
    fields = Path(f"{where}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_once(containers: int, seconds: float, metrics_on: bool, every: float) -> dict[str, float]:
    port = _free_port() if metrics_on else 0
    plans = [f"c{i:02d}:3:1" for i in range(containers)]
    with tempfile.TemporaryDirectory(prefix="tr-agent-cpu-") as tmp:
        argv = [sys.executable, "-m", "tests.helpers.slice_agent", tmp, str(port),
                str(WARMUP + seconds + 5), *plans]  # fmt: skip
        env = dict(os.environ, PYTHONPATH=str(REPO), SLICE_AGENT_FRAMES="1")
        # Its log to a file, not a pipe nobody reads (a full pipe would stall the agent's tick)
        log = open(Path(tmp) / "agent.log", "wb")  # noqa: SIM115  (closed with the folder)
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stderr=log)
        try:
            time.sleep(WARMUP)
            c0, m0, t0 = _cpu_seconds(proc.pid), _cpu_seconds(proc.pid, proc.pid), time.monotonic()
            scrapes, size = 0, 0
            next_scrape = t0
            while time.monotonic() - t0 < seconds:
                if metrics_on and time.monotonic() >= next_scrape:
                    next_scrape += every
                    url = f"http://127.0.0.1:{port}/metrics"
                    with urllib.request.urlopen(url, timeout=5) as r:
                        size = len(r.read())
                    scrapes += 1
                time.sleep(1.0)
            c1, m1, t1 = _cpu_seconds(proc.pid), _cpu_seconds(proc.pid, proc.pid), time.monotonic()
        finally:
            proc.kill()
            proc.wait()
            log.close()
    wall = t1 - t0
    return {"cpu_percent": 100 * (c1 - c0) / wall, "main_percent": 100 * (m1 - m0) / wall,
            "scrapes": scrapes, "bytes": size}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--containers", type=int, default=32)
    ap.add_argument("--scrape-every", type=float, default=1.0, help="seconds between scrapes")
    a = ap.parse_args()
    on, off = [], []
    for _ in range(a.rounds):
        on.append(run_once(a.containers, a.seconds, True, a.scrape_every))
        off.append(run_once(a.containers, a.seconds, False, a.scrape_every))
    runs_on = ", ".join(f"{r['cpu_percent']:.2f}" for r in on)
    runs_off = ", ".join(f"{r['cpu_percent']:.2f}" for r in off)
    med_on = statistics.median(r["cpu_percent"] for r in on)
    med_off = statistics.median(r["cpu_percent"] for r in off)
    main_on = statistics.median(r["main_percent"] for r in on)
    main_off = statistics.median(r["main_percent"] for r in off)
    load = os.getloadavg()
    lines = [
        f"agent CPU at {a.containers} containers, {a.rounds} rounds x {a.seconds:.0f} s, "
        f"load {load[0]:.1f} ({os.cpu_count()} cores)",
        f"  metrics on  (scraped every {a.scrape_every:g} s, {on[-1]['bytes']} B): "
        f"median {med_on:.2f} % of a "
        f"core  (runs: {runs_on})",
        f"  metrics off:                              median {med_off:.2f} % of a core  "
        f"(runs: {runs_off})",
        f"  of which the main thread (the tick): on {main_on:.2f} %, off {main_off:.2f} %; "
        f"other threads (health monitor, /metrics server) the rest",
        f"  metrics cost: {med_on - med_off:+.2f} points; goal: on <= 1 % of a core: "
        f"{'met' if med_on <= 1.0 else 'NOT met'}",
    ]
    text = "\n".join(lines)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = f"agent_metrics_cpu_scrape{a.scrape_every:g}s"
    (RESULTS / f"{name}.txt").write_text(text + "\n")
    (RESULTS / f"{name}.json").write_text(
        json.dumps({"containers": a.containers, "seconds": a.seconds, "every": a.scrape_every,
                    "on": on, "off": off,
                    "median_on": med_on, "median_off": med_off, "main_on": main_on,
                    "main_off": main_off, "load": load}, indent=1) + "\n"
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
