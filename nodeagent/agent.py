"""The agent process: discovery, slice publishing, DRA plugin, status stream and metrics.

`run(opts)` wires the parts and loops at `interval`: status collection, one status message,
metrics update; the pool is re-published (lease renewed) every few seconds. The kubelet runs
the pods and calls the DRA plugin. On SIGTERM/SIGINT it stops the plugin sockets and gives the
lease back, so a restarted agent takes the pool over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from nodeagent import profiling
from nodeagent.compute_watch import DEFAULT_TOLERANCE_POINTS, DEFAULT_WINDOW_S, ComputeWatch
from nodeagent.throttle import CGROUP_ROOT

log = logging.getLogger("nodeagent")
# Where an install puts the interception core (the image, the Helm chart); --core-lib or
# TRANCHE_CORE_LIB say otherwise. The agent never looks for it in a source checkout.
CORE_LIB = Path("/usr/lib/tranche/libtranche.so")
PUBLISH_EVERY = 10.0  # seconds: re-check the pool (repairs drift) and renew the lease


@dataclass(frozen=True)
class Options:
    node: str
    portal: str | None
    token_file: Path | None
    kubeconfig: Path | None
    simulate: bool
    state_dir: Path
    kubelet_dir: Path
    cdi_dir: Path
    core_lib: Path
    simgpu_dir: Path | None
    sim_gpus: int
    sim_model: str
    metrics_port: int
    interval: float
    backstop: bool
    tolerance_mib: int
    # Where the driver logs XIDs with the process they belong to; simulation: simgpu-fault's log
    kernel_log: Path | None = Path("/dev/kmsg")
    health_check_every: float = 1.0  # seconds between "does each GPU still answer" checks
    # The compute backstop (nodeagent/compute_watch.py): a claim's mean NVML utilisation over
    # this window above its share by more than the tolerance throttles its pods to the share.
    compute_window_s: float = DEFAULT_WINDOW_S
    compute_tolerance_points: float = DEFAULT_TOLERANCE_POINTS
    metrics_addr: str = "127.0.0.1"
    cgroup_root: Path = CGROUP_ROOT  # the host's cgroup mount: the pods' freezers
    metrics_token_file: Path | None = None  # /metrics behind this bearer token


def api_client(kubeconfig: Path | None):
    """--kubeconfig, else in a pod its ServiceAccount (the chart's DaemonSet), else $KUBECONFIG.

    The kubernetes client's new_client_from_config never falls back to the in-cluster config
    by itself: without this the chart's agents exited at start ("Invalid kube-config file").
    """
    import os

    from kubernetes import client
    from kubernetes import config as kconfig

    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        conf = client.Configuration()
        kconfig.load_incluster_config(client_configuration=conf)
        return client.ApiClient(conf)
    return kconfig.new_client_from_config(str(kubeconfig) if kubeconfig else None)


async def run(opts: Options) -> None:
    from nodeagent import discovery, owners
    from nodeagent.draplugin.prepare import Layout, Preparer, api_claim_source
    from nodeagent.draplugin.server import PluginServer, Sockets
    from nodeagent.health import HealthMonitor
    from nodeagent.slices import SlicePublisher
    from nodeagent.status import Collector

    sim_env: dict[str, str] = {}
    if opts.simulate:
        from nodeagent.sim.gpus import simulate_node_gpus

        sim_env = simulate_node_gpus(
            opts.node, opts.state_dir, opts.simgpu_dir, opts.sim_gpus, opts.sim_model
        )
    gpus = discovery.discover()
    kernel_log = opts.kernel_log
    if opts.simulate and "SIMGPU_STATE" in sim_env:
        kernel_log = Path(sim_env["SIMGPU_STATE"] + ".kmsg")  # simgpu-fault's simulated log
    health = HealthMonitor(gpus, kernel_log=kernel_log, check_every=opts.health_check_every,
                           checkpoint=opts.state_dir / "gpu-health.json")  # fmt: skip
    log.info("node %s: %d GPU(s): %s", opts.node, len(gpus), ", ".join(g.uuid for g in gpus))
    api = api_client(opts.kubeconfig)
    publisher = SlicePublisher(api, opts.node)
    # The kubelet and the runtime run the pods; in simulation CDI mounts simgpu into them.
    # Absolute paths: the runtime resolves a CDI mount's host path in its own folder.
    sim_driver = opts.simgpu_dir.resolve() if opts.simulate else None
    layout = Layout(
        opts.state_dir.resolve(), opts.cdi_dir, opts.core_lib.resolve(), opts.simulate, sim_driver
    )
    preparer = Preparer(opts.node, gpus, layout, api_claim_source(api), unhealthy=health.unhealthy)
    sockets = Sockets.under(opts.kubelet_dir)
    collector = Collector(
        opts.node,
        preparer.checkpoint,
        gpus,
        # simgpu's NVML is loaded in this process in simulation mode and reports per-process
        # memory too, so the backstop runs there as on a real driver.
        nvml_process_memory=discovery.process_memory,
        nvml_process_utilisation=discovery.process_utilisation,
        compute=ComputeWatch(opts.compute_window_s, opts.compute_tolerance_points),
        tolerance_bytes=opts.tolerance_mib * 1024**2,
        kill_offenders=opts.backstop,
        tenant_pod=owners.TenantPods(api, opts.node),
        cgroup_root=opts.cgroup_root,
    )
    server = PluginServer(preparer, sockets, on_prepare_failed=collector.prepare_failed)
    server.start()
    try:
        await _loop(opts, gpus, publisher, collector, health=health, checkpoint=preparer.checkpoint)
    finally:
        health.stop()
        collector.close()  # thaw every pod the compute backstop holds
        server.stop()
        publisher.lease.release()
        log.info("agent of node %s stopped", opts.node)


async def _guarded(loop, what: str, fn, *args) -> bool:
    """Run blocking `fn` in the executor; False if it failed or returned False. An API server or
    network error is logged and retried on a later tick instead of ending the agent."""
    try:
        result = await loop.run_in_executor(None, profiling.blocking(fn), *args)
    except Exception as exc:  # any failure: retry on a later tick
        log.warning("%s failed, retrying: %s", what, exc)
        return False
    return result is not False  # False: not done yet (e.g. pool held by another agent)


def _health_findings(opts: Options, health, checkpoint, collector) -> None:
    """Health events since the last tick, as findings for support and the pods concerned."""
    from nodeagent import owners
    from nodeagent.health_findings import findings_for

    for event in health.take_events():
        for kind, ns, subject, detail, extra in findings_for(
            event, opts.node, checkpoint.all(), owners.pod_uid
        ):
            log.warning("health: %s %s/%s: %s", kind, ns, subject, detail)
            collector.report(kind, ns, subject, detail, **extra)


def _serve_metrics(opts: Options, health):
    """The agent's /metrics (docs/metrics.md), or None when off or its port is taken: the
    agent's work matters more than its /metrics."""
    from nodeagent import metrics

    if not opts.metrics_port:
        return None
    try:
        token = opts.metrics_token_file.read_text().strip() if opts.metrics_token_file else ""
        if opts.metrics_token_file and not token:
            raise OSError(f"{opts.metrics_token_file} is empty: /metrics stays closed")
        gauges = metrics.serve(opts.node, opts.metrics_port, opts.metrics_addr, token)
    except OSError as exc:
        log.error("no /metrics on %s:%d: %s", opts.metrics_addr, opts.metrics_port, exc)
        return None
    gauges.slices.health = health
    return gauges


async def _loop(opts: Options, gpus, publisher, collector, *, health, checkpoint) -> None:
    """Tick at `interval` until SIGTERM/SIGINT; blocking work runs in the default executor. A
    health change wakes the loop at once: the pool is republished with the GPU's taint."""
    from nodeagent.slices import device_taint
    from nodeagent.stream import StatusStream

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()
    health.on_change = lambda: loop.call_soon_threadsafe(wake.set)
    health.start()
    published_taints: dict | None = None
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    stream = None
    tasks = []
    if opts.portal and opts.token_file:
        token = opts.token_file.read_text().strip()
        stream = StatusStream(opts.portal, opts.node, token)
        stream.on_in_service = health.mark_in_service
        tasks.append(asyncio.create_task(stream.run(stop)))
    gauges = _serve_metrics(opts, health)
    last_publish = 0.0
    try:
        while not stop.is_set():
            started = time.monotonic()
            wake.clear()
            taints = {
                u.uuid: device_taint(u.verdict.taint_value, u.since)
                for u in health.unhealthy().values()
            }
            due = started - last_publish > PUBLISH_EVERY or taints != published_taints
            publish = functools.partial(publisher.publish, gpus, taints=taints)
            if due and await _guarded(loop, "publishing the pool", publish):
                last_publish, published_taints = started, taints
            _health_findings(opts, health, checkpoint, collector)
            gpu_status, pods = await loop.run_in_executor(
                None, profiling.blocking(collector.collect)
            )
            if stream is not None:
                stream.offer(gpu_status, pods, collector.take_findings())
            if gauges is not None:
                nvml = await loop.run_in_executor(None, _utilisation, gpus)
                gauges.slices.update(collector.slices, nvml, collector.backstop_actions)
                gauges.tick.observe(time.monotonic() - started)
            wait = max(0.05, opts.interval - (time.monotonic() - started))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_either(stop, wake), timeout=wait)
    finally:
        stop.set()
        for t in tasks:
            await asyncio.gather(t, return_exceptions=True)


def _utilisation(gpus) -> list[tuple[str, str, int | None]]:
    """(uuid, model, NVML utilisation percent) of every GPU, for /metrics."""
    from nodeagent import discovery

    return [(g.uuid, g.name, discovery.utilisation(g.uuid)) for g in gpus]


async def _either(a: asyncio.Event, b: asyncio.Event) -> None:
    """Return when either event is set."""
    waits = [asyncio.ensure_future(a.wait()), asyncio.ensure_future(b.wait())]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
