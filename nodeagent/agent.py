"""The agent process: discovery, slice publishing, DRA plugin, status stream and metrics.

`run(opts)` wires the parts and loops at `interval`: kubelet-lite sync (simulation only),
status collection, one status message, metrics update; the pool is re-published (lease renewed)
every few seconds. On SIGTERM/SIGINT it stops simulated workloads, the plugin sockets and the
lease, so a restarted agent takes the pool over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("nodeagent")
REPO = Path(__file__).resolve().parent.parent
SIMGPU_DIR = REPO / "nodeagent" / "native" / "build" / "simgpu"
CORE_LIB = REPO / "nodeagent" / "native" / "build" / "libtranche.so"
PUBLISH_EVERY = 10.0  # seconds: re-check the pool (repairs drift) and renew the lease


@dataclass(frozen=True)
class Options:
    node: str
    portal: str | None
    token_file: Path | None
    kubeconfig: Path | None
    simulate: bool
    kubelet_lite: bool
    state_dir: Path
    kubelet_dir: Path
    cdi_dir: Path
    core_lib: Path
    sim_gpus: int
    sim_model: str
    metrics_port: int
    interval: float
    backstop: bool
    tolerance_mib: int


def simulate_node_gpus(opts: Options) -> dict[str, str]:
    """Point NVML/CUDA at simgpu with node-unique GPU UUIDs; returns the env workloads get."""
    opts.state_dir.mkdir(parents=True, exist_ok=True)
    config = opts.state_dir / "simgpu.conf"
    # Unique per node name (UUIDs are published cluster-wide), stable across restarts.
    tag = int.from_bytes(hashlib.sha256(opts.node.encode()).digest()[:4], "big")
    lines = [
        f'device name="{opts.sim_model}" memory_mib=32768 sm_count=80 cc=7.0 '
        f"uuid=GPU-{tag:08x}-0000-4000-8000-{i:012x}"
        for i in range(opts.sim_gpus)
    ]
    config.write_text("\n".join(lines) + "\n")
    env = {
        "SIMGPU_CONFIG": str(config),
        "SIMGPU_STATE": str(opts.state_dir / "simgpu.state"),
        "LD_LIBRARY_PATH": str(SIMGPU_DIR),
    }
    os.environ.update({k: v for k, v in env.items() if k.startswith("SIMGPU")})
    # pynvml dlopens "libnvidia-ml.so.1"; loading simgpu's first makes that name resolve to it.
    ctypes.CDLL(str(SIMGPU_DIR / "libnvidia-ml.so.1"), mode=ctypes.RTLD_GLOBAL)
    # Likewise libcuda.so.1, which discovery uses to measure a context's footprint.
    ctypes.CDLL(str(SIMGPU_DIR / "libcuda.so.1"), mode=ctypes.RTLD_GLOBAL)
    return env


async def run(opts: Options) -> None:
    from kubernetes import config as kconfig

    from nodeagent import discovery, owners
    from nodeagent.draplugin.prepare import Layout, Preparer, api_claim_source
    from nodeagent.draplugin.server import PluginServer, Sockets
    from nodeagent.sim.kubeletlite import KubeletLite
    from nodeagent.slices import SlicePublisher
    from nodeagent.status import Collector

    sim_env = simulate_node_gpus(opts) if opts.simulate else {}
    gpus = discovery.discover()
    log.info("node %s: %d GPU(s): %s", opts.node, len(gpus), ", ".join(g.uuid for g in gpus))
    api = kconfig.new_client_from_config(str(opts.kubeconfig) if opts.kubeconfig else None)
    publisher = SlicePublisher(api, opts.node)
    layout = Layout(opts.state_dir, opts.cdi_dir, opts.core_lib, opts.simulate)
    preparer = Preparer(opts.node, gpus, layout, api_claim_source(api))
    sockets = Sockets.under(opts.kubelet_dir)
    server = PluginServer(preparer, sockets)
    server.start()
    lite = None
    if opts.kubelet_lite:
        lite = KubeletLite(
            api, opts.node, plugin_socket=sockets.plugin, cdi_dir=opts.cdi_dir,
            sim_env=sim_env, log_dir=opts.state_dir / "pods",
        )  # fmt: skip
        lite.register(sockets.registry)
    collector = Collector(
        opts.node,
        preparer.checkpoint,
        gpus,
        # simgpu's NVML is loaded in this process in simulation mode and reports per-process
        # memory too, so the backstop runs there as on a real driver.
        nvml_process_memory=discovery.process_memory,
        tolerance_bytes=opts.tolerance_mib * 1024**2,
        kill_offenders=opts.backstop,
        tenant_pod=owners.TenantPods(api, opts.node),
    )
    try:
        await _loop(opts, gpus, publisher, lite, collector)
    finally:
        if lite is not None:
            lite.stop_all()
        server.stop()
        publisher.lease.release()
        log.info("agent of node %s stopped", opts.node)


async def _guarded(loop, what: str, fn, *args) -> bool:
    """Run blocking `fn` in the executor; False if it failed or returned False. An API server or
    network error is logged and retried on a later tick instead of ending the agent."""
    try:
        result = await loop.run_in_executor(None, fn, *args)
    except Exception as exc:  # any failure: retry on a later tick
        log.warning("%s failed, retrying: %s", what, exc)
        return False
    return result is not False  # False: not done yet (e.g. pool held by another agent)


async def _loop(opts: Options, gpus, publisher, lite, collector) -> None:
    """Tick at `interval` until SIGTERM/SIGINT; blocking work runs in the default executor."""
    from nodeagent import metrics
    from nodeagent.stream import StatusStream

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    stream = None
    tasks = []
    if opts.portal and opts.token_file:
        token = opts.token_file.read_text().strip()
        stream = StatusStream(opts.portal, opts.node, token)
        tasks.append(asyncio.create_task(stream.run(stop)))
    gauges = metrics.serve(opts.node, opts.metrics_port) if opts.metrics_port else None
    last_publish = 0.0
    try:
        while not stop.is_set():
            started = time.monotonic()
            due = started - last_publish > PUBLISH_EVERY
            if due and await _guarded(loop, "publishing the pool", publisher.publish, gpus):
                last_publish = started
            if lite is not None:
                await _guarded(loop, "kubelet-lite sync", lite.sync)
            gpu_status, pods = await loop.run_in_executor(None, collector.collect)
            if stream is not None:
                stream.offer(gpu_status, pods)
            if gauges is not None:
                gauges.update(list(pods.values()))
            wait = max(0.05, opts.interval - (time.monotonic() - started))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=wait)
    finally:
        stop.set()
        for t in tasks:
            await asyncio.gather(t, return_exceptions=True)
