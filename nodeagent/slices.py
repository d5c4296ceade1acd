"""ResourceSlices of driver `gpu.tranche.dev`: a pure renderer and the publisher.

One slice per node (pool = node name) lists every GPU as one device with
`allowMultipleAllocations: true`; its `memory` and `cores` capacities carry a request policy whose
valid values are exactly the sellable slice sizes of that GPU model, so what the scheduler
allocates is always a size we sell: a request between two sizes consumes the next larger one
(the scheduler rounds up), one above the largest is never allocated (measured on v1.37.2 in
tests/cluster/nodeagent). Each slice is owned by its Node, so deleting the node deletes it.

The publisher holds a Lease per pool before it writes, so two agents started for the same node
never fight over the pool: the second one waits until the first one's lease expires.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from nodeagent.discovery import GpuInfo
from tranche.names import (
    ANNOTATION_DEVICES_DIGEST,
    DRIVER,
    LABEL_SLICE_MANAGED_BY,
    SLICE_MANAGER,
    TAINT_GPU_UNHEALTHY,
)

log = logging.getLogger(__name__)

LABEL_MANAGED = LABEL_SLICE_MANAGED_BY
ANNOTATION_DIGEST = ANNOTATION_DEVICES_DIGEST
LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 30
GIB = 1024**3


@dataclass(frozen=True)
class SliceSizes:
    """Sellable sizes of one GPU model: memory in GiB and the matching compute share (%)."""

    memory_gib: tuple[int, ...]
    cores_percent: tuple[int, ...]


# The reference catalogue (portal/catalog/seed.py): V100 slices of 8/16/32 GiB at 25/50/100 %.
SELLABLE: dict[str, SliceSizes] = {
    "Tesla V100-PCIE-32GB": SliceSizes((8, 16, 32), (25, 50, 100)),
    "Tesla V100-SXM2-32GB": SliceSizes((8, 16, 32), (25, 50, 100)),
}


def sizes_for(gpu: GpuInfo) -> SliceSizes:
    """Known models use the catalogue; others get quarters, halves and the whole GPU."""
    if gpu.name in SELLABLE:
        return SELLABLE[gpu.name]
    whole = gpu.memory_bytes // GIB
    return SliceSizes(tuple(sorted({max(1, whole // 4), max(1, whole // 2), whole})), (25, 50, 100))


def device_taint(value: str, since: float) -> dict:
    """The NoExecute DRA device taint of a failed GPU: the scheduler places no claim on it and
    kube-controller-manager evicts the pods whose claims use it. `value` says why ("xid-79"),
    `since` (epoch seconds) is when the agent saw it, kept so a re-render is identical."""
    added = datetime.fromtimestamp(int(since), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"key": TAINT_GPU_UNHEALTHY, "value": value, "effect": "NoExecute", "timeAdded": added}


def render_device(gpu: GpuInfo, taint: dict | None = None) -> dict:
    """One DRA device for one GPU, shareable by consumable capacity; tainted when it failed."""
    sizes = sizes_for(gpu)
    device = {
        "name": gpu.device_name,
        "allowMultipleAllocations": True,
        "attributes": {
            "productName": {"string": gpu.name},
            "uuid": {"string": gpu.uuid},
            "architecture": {"string": gpu.architecture},
            "cudaComputeCapability": {"version": _semver(gpu.compute_capability)},
            "driverVersion": {"version": _semver(gpu.driver_version)},
            "index": {"int": gpu.index},
        },
        "capacity": {
            "memory": {
                "value": f"{gpu.memory_bytes // (1024**2)}Mi",
                "requestPolicy": {
                    "default": f"{sizes.memory_gib[0]}Gi",
                    "validValues": [f"{g}Gi" for g in sizes.memory_gib],
                },
            },
            "cores": {
                "value": "100",
                "requestPolicy": {
                    "default": str(sizes.cores_percent[0]),
                    "validValues": [str(c) for c in sizes.cores_percent],
                },
            },
        },
    }
    if taint is not None:
        device["taints"] = [taint]
    return device


def _semver(text: str) -> str:
    """DRA version attributes must be semver: "7.0" -> "7.0.0", "550.54.15" stays."""
    parts = [p for p in text.split(".") if p.isdigit()][:3] or ["0"]
    parts += ["0"] * (3 - len(parts))
    return ".".join(str(int(p)) for p in parts)


def slice_name(node: str) -> str:
    """The name of the one ResourceSlice of `node`'s pool."""
    return f"{node}-{DRIVER.replace('.', '-')}"


def render_resource_slice(
    node: str,
    gpus: Iterable[GpuInfo],
    generation: int,
    node_uid: str | None = None,
    taints: Mapping[str, dict] | None = None,
) -> dict:
    """The complete ResourceSlice for a node's pool (pure: same input, same dict).

    With `node_uid` the slice is owned by its Node (as the kubelet's DRA helper does), so
    deleting the node garbage-collects the slice even when no agent is left to withdraw it.
    `taints`: GPU UUID -> its device taint (`device_taint`), for the GPUs that failed.
    """
    taints = taints or {}
    metadata: dict = {
        "name": slice_name(node),
        "labels": {LABEL_MANAGED: SLICE_MANAGER},
    }
    if node_uid:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [
                render_device(g, taints.get(g.uuid)) for g in sorted(gpus, key=lambda g: g.index)
            ],
        },
    }


class PoolLease:
    """A coordination Lease naming the one agent allowed to write a node's pool.

    The holder renews with one write: it keeps the resourceVersion its last write returned and
    replaces the lease at that version (compare-and-swap); only when that fails (someone else
    wrote it, or it was deleted) does it read the lease again."""

    def __init__(self, api_client, node: str, identity: str | None = None) -> None:
        from kubernetes import client

        self.api = client.CoordinationV1Api(api_client)
        self.name = f"{DRIVER.replace('.', '-')}-{node}"
        self.identity = identity or f"{socket.gethostname()}-{os.getpid()}"
        self._version: str | None = None  # resourceVersion of our own last write

    def _body(self, now: datetime, version: str | None) -> dict:
        body = {
            "metadata": {"name": self.name},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
        }
        if version is not None:
            body["metadata"]["resourceVersion"] = version
        return body

    def _replace(self, body: dict) -> None:
        resp = self.api.replace_namespaced_lease(
            self.name, LEASE_NAMESPACE, body, _preload_content=False
        )
        self._version = json.loads(resp.data)["metadata"]["resourceVersion"]

    def try_acquire(self) -> bool:
        """Take or renew the lease; False while another live agent holds it (CAS on version)."""
        from kubernetes.client.rest import ApiException

        now = datetime.now(UTC)
        if self._version is not None:
            try:
                self._replace(self._body(now, self._version))
                return True
            except ApiException as exc:
                if exc.status not in (404, 409):
                    raise
                self._version = None  # changed or gone since our write: look again
        try:
            resp = self.api.read_namespaced_lease(
                self.name, LEASE_NAMESPACE, _preload_content=False
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            try:
                resp = self.api.create_namespaced_lease(
                    LEASE_NAMESPACE, self._body(now, None), _preload_content=False
                )
            except ApiException as exc2:
                if exc2.status == 409:  # another agent created it first
                    return False
                raise
            self._version = json.loads(resp.data)["metadata"]["resourceVersion"]
            return True
        lease = json.loads(resp.data)
        spec = lease.get("spec") or {}
        held_by_other = spec.get("holderIdentity") not in (None, "", self.identity)
        if held_by_other and spec.get("renewTime"):
            renewed = datetime.fromisoformat(spec["renewTime"].replace("Z", "+00:00"))
            if (now - renewed).total_seconds() < (
                spec.get("leaseDurationSeconds") or LEASE_SECONDS
            ):
                return False
        try:
            self._replace(self._body(now, lease["metadata"]["resourceVersion"]))
        except ApiException as exc:
            if exc.status == 409:  # lost the race to another agent
                return False
            raise
        return True

    def release(self) -> None:
        from kubernetes.client.rest import ApiException

        self._version = None
        try:
            self.api.delete_namespaced_lease(self.name, LEASE_NAMESPACE)
        except ApiException as exc:
            if exc.status != 404:
                raise


def spec_digest(resource_slice: dict) -> str:
    """Hash of a rendered slice's devices and pool name (not its generation)."""
    spec = resource_slice["spec"]
    text = json.dumps([spec["pool"]["name"], spec["devices"]], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _published_digest(resource_slice: dict) -> tuple[str | None, str | None]:
    meta = resource_slice["metadata"]
    owners = meta.get("ownerReferences") or [{}]
    return (meta.get("annotations") or {}).get(ANNOTATION_DIGEST), owners[0].get("uid")


class SlicePublisher:
    """Writes the pool's slice when it differs from what we want; deletes slices of this pool
    it does not want (e.g. left by an older naming). An unchanged pool writes nothing."""

    def __init__(self, api_client, node: str) -> None:
        from kubernetes import client

        self.api = client.ResourceV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.node = node
        self.lease = PoolLease(api_client, node)
        self._standby = False
        self._digested: tuple[tuple, str] | None = None  # ((GPUs, taints), their digest)

    def _existing(self) -> list[dict]:
        resp = self.api.list_resource_slice(
            field_selector=f"spec.driver={DRIVER},spec.nodeName={self.node}",
            _preload_content=False,
        )
        return json.loads(resp.data)["items"]

    def _node_uid(self) -> str:
        resp = self.core.read_node(self.node, _preload_content=False)
        return json.loads(resp.data)["metadata"]["uid"]

    def publish(
        self,
        gpus: list[GpuInfo],
        *,
        existing: list[dict] | None = None,
        node_uid: str | None = None,
        taints: Mapping[str, dict] | None = None,
    ) -> bool:
        """Publish if we hold the pool; returns False while another agent holds it.

        Level-triggered: the slice on the server is compared (by a hash of what we render, and
        its owner) with what we want, so a slice deleted or edited by someone else, or a node
        recreated under the same name, is repaired on the next call; an unchanged pool writes
        nothing and keeps its generation. One call costs the lease renewal plus, unless the
        caller passes them (the fleet publisher lists them once for every node), a LIST of the
        pool's slices and a GET of the node. `taints`: the failed GPUs' device taints.
        """
        if not self.lease.try_acquire():
            if not self._standby:  # once per change: a standby agent retries every tick
                log.warning("pool %s is held by another agent; not publishing", self.node)
            self._standby = True
            return False
        if self._standby:
            log.info("pool %s: took over the lease", self.node)
        self._standby = False
        current = tuple(sorted(gpus, key=lambda g: g.index))
        taints = dict(taints or {})
        key = (current, json.dumps(taints, sort_keys=True))
        if existing is None:
            existing = self._existing()
        if node_uid is None:
            node_uid = self._node_uid()
        name = slice_name(self.node)
        if self._digested is None or self._digested[0] != key:
            # rendered and hashed once per set of GPUs, not per renewal (the fleet renews many)
            rendered = render_resource_slice(self.node, current, 0, taints=taints)
            self._digested = (key, spec_digest(rendered))
        digest = self._digested[1]
        mine = [s for s in existing if s["metadata"]["name"] == name]
        stale = [s for s in existing if s["metadata"]["name"] != name]
        if mine and not stale and _published_digest(mine[0]) == (digest, node_uid):
            return True
        generation = max((s["spec"]["pool"]["generation"] for s in existing), default=0) + 1
        wanted = render_resource_slice(self.node, current, generation, node_uid, taints)
        wanted["metadata"]["annotations"] = {ANNOTATION_DIGEST: digest}
        if mine:
            wanted["metadata"]["resourceVersion"] = mine[0]["metadata"]["resourceVersion"]
            self.api.replace_resource_slice(name, wanted, _preload_content=False)
        else:
            self.api.create_resource_slice(wanted, _preload_content=False)
        for s in stale:
            self.api.delete_resource_slice(s["metadata"]["name"], _preload_content=False)
        log.info("published pool %s generation %d with %d GPUs", self.node, generation, len(gpus))
        return True

    def withdraw(self) -> None:
        """Delete the pool's slices and give up the lease (agent shutdown on a drained node)."""
        for s in self._existing():
            self.api.delete_resource_slice(s["metadata"]["name"])
        self.lease.release()
