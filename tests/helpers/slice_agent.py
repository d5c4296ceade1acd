"""The node agent's metrics side over real slices on one simulated GPU, as a process of its own.

`python -m tests.helpers.slice_agent STATE PORT SECONDS NAME:PERCENT[:PROCS] ...` (PORT 0: no
/metrics) configures simgpu with one V100 (as `--simulate` does), writes each slice's config
and region as the DRA plugin would (claim `metrics/<NAME>`, 8 GiB, PERCENT compute) into the
agent's checkpoint, starts PROCS `burn` workloads per slice under the interception core (0: an
allocated slice nothing runs on, which goes idle), and runs the agent's own collector, NVML
reading, health monitor and /metrics server (`nodeagent.status.Collector`, `nodeagent.metrics`,
`nodeagent.health`) every second, as `nodeagent.agent._loop` does, until SECONDS are over. The
integration tier has no kubelet to prepare claims: this plays that part only. Needs
`make -C nodeagent/native` (the core's test variant and `burn`).

With SLICE_AGENT_FRAMES=1 in its environment (bench/agent_metrics_cpu.py) each tick also hands
its sample to a status stream and encodes the frame the agent would send (`StatusStream.offer`,
`next_frame`), sending it nowhere: there is no portal here. What the agent's loop does beyond
this: publish the pool every 10 s (an API call) and send the frame on its websocket.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "nodeagent" / "native" / "build"
NODE = "metrics-node"
GIB = 1024**3
KERNEL_NS = 10_000_000  # 10 ms kernels, 4 in flight per process: a busy host cannot starve them


def _frames() -> bool:
    return os.environ.get("SLICE_AGENT_FRAMES") == "1"


def _ahead() -> None:
    with contextlib.suppress(OSError):
        os.nice(-10)


def main(state: Path, port: int, seconds: float, plans: list[str]) -> None:
    from nodeagent import discovery, metrics, sliceconfig
    from nodeagent.checkpoint import Checkpoint, PreparedClaim, PreparedDevice
    from nodeagent.health import HealthMonitor
    from nodeagent.sim.gpus import simulate_node_gpus, simulated_gpus
    from nodeagent.status import Collector
    from nodeagent.stream import StatusStream

    # Stopped by SIGTERM (the tests' terminate()): exit through `finally`, which kills the
    # workloads; without this they outlived the test by up to SECONDS, burning ahead of the
    # next tests at nice -10.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    model = "Tesla V100-PCIE-32GB"
    env = simulate_node_gpus(NODE, state, BUILD / "simgpu", 1, model)
    gpus = simulated_gpus(NODE, 1, model)
    checkpoint = Checkpoint(state / "checkpoint.json")
    procs = []
    for plan in plans:
        name, pct, *n = plan.split(":")
        slot = state / name
        config = sliceconfig.SliceConfig(
            claim=f"metrics/{name}",
            devices=(sliceconfig.DeviceSlice(gpus[0].uuid, 8 * GIB, int(pct)),),
        )
        sliceconfig.write(slot / "slice.conf", config)
        (slot / "region").mkdir(parents=True, exist_ok=True)
        device = PreparedDevice("gpu", NODE, "gpu-0", gpus[0].uuid, name, 8 * GIB, int(pct), "")
        checkpoint.put(
            PreparedClaim(
                f"uid-{name}", "metrics", name, (device,), str(slot / "slice.conf"), "",
                str(slot / "region"), (f"metrics/{name}-pod/uid-{name}-pod",),
            )
        )  # fmt: skip
        run_env = dict(env, TRANCHE_SLICE_CONFIG=str(slot / "slice.conf"),
                       TRANCHE_REGION_DIR=str(slot / "region"),
                       LD_PRELOAD=str(BUILD / "libtranche-test.so"))  # fmt: skip
        for _ in range(int(n[0]) if n else 1):
            argv = [str(BUILD / "tests" / "burn"), "0", str(KERNEL_NS), str(seconds)]
            # Ahead of the machine's other work (root): a 2-core host shared by test runs
            # would otherwise wake the limiter's waits late and the slice under-use its share.
            # preexec_fn: this process has started no thread yet
            out = subprocess.DEVNULL
            procs.append(subprocess.Popen(argv, env=run_env, stdout=out, preexec_fn=_ahead))  # noqa: PLW1509
    # As nodeagent.agent.run builds it: NVML's memory and compute backstops both on (stopping
    # nothing: a test's slices stay within their shares, and kill_offenders only acts then).
    collector = Collector(NODE, checkpoint, gpus, nvml_process_memory=discovery.process_memory,
                          nvml_process_utilisation=discovery.process_utilisation)  # fmt: skip
    served = metrics.serve(NODE, port) if port else None  # 0: metrics off (bench/'s baseline)
    health = HealthMonitor(gpus, kernel_log=Path(env["SIMGPU_STATE"] + ".kmsg"))
    if served is not None:
        served.slices.health = health
    health.start()
    stream = StatusStream("ws://127.0.0.1:9/ws/agent/", NODE, "-") if _frames() else None
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            started = time.monotonic()
            gpu_status, pods = collector.collect()
            if stream is not None:
                stream.offer(gpu_status, pods, collector.take_findings())
                stream.next_frame()
            if served is not None:
                nvml = [(g.uuid, g.name, discovery.utilisation(g.uuid)) for g in gpus]
                served.slices.update(collector.slices, nvml, collector.backstop_actions)
                served.tick.observe(time.monotonic() - started)
            time.sleep(max(0.05, 1.0 - (time.monotonic() - started)))
    finally:
        health.stop()
        for p in procs:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:])
