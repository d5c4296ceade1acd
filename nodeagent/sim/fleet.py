"""Fleet mode: one process publishes the ResourceSlices of many simulated (kwok) GPU nodes.

A fleet benchmark needs hundreds of GPU nodes; one `nodeagent run --simulate` per node would
need a process, simgpu and a plugin server each. `python -m nodeagent fleet` instead publishes
for every node that matches a label selector, with the agent's own `SlicePublisher` per node
(the pool's Lease, the owner reference to the Node, write only when the digest differs), and
the GPUs a per-node simulated agent would publish, built purely (`simulated_gpus`: same UUIDs,
same model figures, no simgpu loaded). It serves no DRA plugin and runs no pods: pods on fleet
nodes are kwok's to play.

Each node's GPU model is its `tranche.dev/sim-gpu-model` annotation and its GPU count its
`tranche.dev/gpu-count` label (deploy/devcluster/nodes.py sets both); `--sim-model` and
`--gpus-per-node` stand in where a node carries neither.

Every `interval` (10 s, as the agent) one pass costs two LISTs (the fleet's nodes, the driver's
slices) and one lease renewal per node; an unchanged slice is never rewritten. A node that
appears is published on the next pass; one that disappears is dropped and its lease deleted (its
slice is deleted by the garbage collector through its owner reference).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass

from nodeagent.discovery import GpuInfo
from nodeagent.sim.gpus import simulated_gpus
from nodeagent.slices import SlicePublisher
from tranche.names import ANNOTATION_SIM_GPU_MODEL, DRIVER, LABEL_GPU_COUNT

log = logging.getLogger("nodeagent.fleet")
DEFAULT_MODEL = "Tesla V100-PCIE-32GB"


@dataclass(frozen=True)
class FleetNode:
    """One node of the fleet as the API server lists it, with the GPUs it is simulated with."""

    name: str
    uid: str
    gpus: tuple[GpuInfo, ...]


@dataclass(frozen=True)
class PassResult:
    """What one pass did: nodes seen, pools held and written-or-unchanged, pools another
    process holds, nodes that failed (retried next pass), nodes dropped, seconds taken."""

    nodes: int
    published: int
    standby: int
    failed: int
    dropped: int
    seconds: float


def _simulated_as(item: dict, model: str, gpus_per_node: int) -> tuple[str, int]:
    """(model, GPU count) a listed Node (JSON) is simulated with: its annotation and label,
    else the defaults given."""
    meta = item["metadata"]
    count = (meta.get("labels") or {}).get(LABEL_GPU_COUNT, "")
    return (
        (meta.get("annotations") or {}).get(ANNOTATION_SIM_GPU_MODEL) or model,
        int(count) if count.isdigit() else gpus_per_node,
    )


def fleet_node(item: dict, model: str, gpus_per_node: int) -> FleetNode:
    """A listed Node (JSON) -> its name, UID and simulated GPUs."""
    meta = item["metadata"]
    node_model, count = _simulated_as(item, model, gpus_per_node)
    return FleetNode(
        meta["name"], meta["uid"], tuple(simulated_gpus(meta["name"], count, node_model))
    )


class FleetPublisher:
    """The pools of every node matching `selector`, one `SlicePublisher` each."""

    def __init__(
        self,
        api_client,
        selector: str,
        *,
        model: str = DEFAULT_MODEL,
        gpus_per_node: int = 8,
    ) -> None:
        from kubernetes import client

        if not selector:
            raise ValueError("fleet: a node label selector is required (e.g. tranche.dev/fleet=f)")
        self._client = api_client
        self.core = client.CoreV1Api(api_client)
        self.resource = client.ResourceV1Api(api_client)
        self.selector = selector
        self.model = model
        self.gpus_per_node = gpus_per_node
        self.publishers: dict[str, SlicePublisher] = {}
        # A node's GPUs are built once per (UID, model, count), not on every pass.
        self._nodes: dict[str, tuple[tuple, FleetNode]] = {}

    def _list_nodes(self) -> list[FleetNode]:
        resp = self.core.list_node(label_selector=self.selector, _preload_content=False)
        found = []
        for item in json.loads(resp.data)["items"]:
            meta = item["metadata"]
            key = (meta["uid"], *_simulated_as(item, self.model, self.gpus_per_node))
            known = self._nodes.get(meta["name"])
            if known is None or known[0] != key:
                known = (key, fleet_node(item, self.model, self.gpus_per_node))
                self._nodes[meta["name"]] = known
            found.append(known[1])
        return found

    def _slices_by_node(self) -> dict[str, list[dict]]:
        resp = self.resource.list_resource_slice(
            field_selector=f"spec.driver={DRIVER}", _preload_content=False
        )
        by_node: dict[str, list[dict]] = {}
        for s in json.loads(resp.data)["items"]:
            by_node.setdefault(s["spec"].get("nodeName", ""), []).append(s)
        return by_node

    def run_once(self) -> PassResult:
        """One level-triggered pass over the fleet (blocking; API errors of one node are logged
        and retried on the next pass, a failed LIST raises)."""
        started = time.monotonic()
        nodes = self._list_nodes()
        slices = self._slices_by_node()
        names = {n.name for n in nodes}
        dropped = 0
        for name in [n for n in self.publishers if n not in names]:
            self._drop(name)
            dropped += 1
        published = standby = failed = 0
        for node in nodes:
            publisher = self.publishers.get(node.name)
            if publisher is None:
                publisher = self.publishers[node.name] = SlicePublisher(self._client, node.name)
                log.info("fleet: node %s joined (%d GPUs)", node.name, len(node.gpus))
            try:
                held = publisher.publish(
                    list(node.gpus), existing=slices.get(node.name, []), node_uid=node.uid
                )
            except Exception as exc:  # one node's failure must not stop the others' renewals
                log.warning("fleet: publishing node %s failed, retrying: %s", node.name, exc)
                failed += 1
                continue
            published += held
            standby += not held
        return PassResult(
            len(nodes), published, standby, failed, dropped, time.monotonic() - started
        )

    def _drop(self, name: str) -> None:
        """A node left the fleet: stop renewing its pool and give its lease back."""
        publisher = self.publishers.pop(name)
        self._nodes.pop(name, None)
        try:
            publisher.lease.release()
        except Exception as exc:  # its lease then expires on its own (LEASE_SECONDS)
            log.warning("fleet: releasing the lease of node %s failed: %s", name, exc)
        log.info("fleet: node %s left; no longer publishing it", name)

    def release_all(self) -> None:
        """Give every lease back (shutdown), so another publisher can take the pools at once.
        The slices stay: the nodes still have their GPUs."""
        for name in list(self.publishers):
            self._drop(name)

    def run(self, stop: threading.Event, interval: float) -> None:
        """Pass every `interval` seconds until `stop` is set, then release the leases."""
        try:
            while not stop.is_set():
                try:
                    result = self.run_once()
                except Exception as exc:  # the API server is away: try again next pass
                    log.warning("fleet: pass failed, retrying: %s", exc)
                    result = None
                if result is not None:
                    log.debug("fleet: %s", result)
                    if result.seconds > interval:
                        log.warning(
                            "fleet: a pass over %d nodes took %.1fs, longer than the %.0fs "
                            "interval", result.nodes, result.seconds, interval,
                        )  # fmt: skip
                stop.wait(max(0.1, interval - (result.seconds if result else 0.0)))
        finally:
            self.release_all()
