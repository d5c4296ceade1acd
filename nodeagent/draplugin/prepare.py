"""Prepare and unprepare claims: the logic behind the kubelet's NodePrepareResources.

Prepare reads the claim's allocation from the API server (the kubelet only sends namespace,
name and UID), keeps the results for our driver and pool, and writes per claim: the slice config
(limits, root-owned, mode 0444), the claim's region folder and a CDI spec. Idempotent per claim
UID through the checkpoint: a repeat returns the recorded devices without rewriting anything,
and an agent restart answers from the checkpoint. Unprepare removes what Prepare wrote; an
unknown UID is a success (the kubelet may retry after we already cleaned up).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from nodeagent import cdi, sliceconfig
from nodeagent.checkpoint import Checkpoint, PreparedClaim, PreparedDevice
from nodeagent.discovery import GpuInfo
from nodeagent.slices import DRIVER

log = logging.getLogger(__name__)

ClaimSource = Callable[[str, str], dict]  # (namespace, name) -> ResourceClaim as JSON dict


class PrepareError(Exception):
    """A claim that cannot be prepared; the message goes back to the kubelet and pod events."""


@dataclass(frozen=True)
class Layout:
    """Host paths the plugin writes under."""

    state_dir: Path  # checkpoint, slice configs, regions, preload file
    cdi_dir: Path
    core_library: Path
    simulate: bool  # simulated GPU: no /dev/nvidia* device nodes exist
    # simgpu's libraries and nvidia-smi, mounted into containers (simulation on a real node);
    # None: the runtime provides the driver (a GPU node) or nothing runs the pod (kwok).
    sim_driver_dir: Path | None = None

    @property
    def checkpoint(self) -> Path:
        return self.state_dir / "checkpoint.json"

    @property
    def preload_file(self) -> Path:
        return self.state_dir / "ld.so.preload"

    def config_file(self, uid: str) -> Path:
        return self.state_dir / "claims" / uid / "slice.conf"

    def region_dir(self, uid: str) -> Path:
        return self.state_dir / "regions" / uid

    def device_dir(self, uid: str) -> Path:
        return self.state_dir / "claims" / uid / "dev"

    def sim_driver(self, uid: str) -> cdi.SimDriver | None:
        if self.sim_driver_dir is None:
            return None
        return cdi.SimDriver(
            lib_dir=str(self.sim_driver_dir),
            config=str(self.state_dir / "simgpu.conf"),  # nodeagent.sim.gpus writes both
            state=str(self.state_dir / "simgpu.state"),
            device_dir=str(self.device_dir(uid)),
        )


def api_claim_source(api_client) -> ClaimSource:
    """Read ResourceClaims from the API server as plain JSON (keeps fields the client's
    generated models may not know yet, e.g. consumedCapacity and shareID)."""
    from kubernetes import client

    api = client.ResourceV1Api(api_client)

    def get(namespace: str, name: str) -> dict:
        resp = api.read_namespaced_resource_claim(name, namespace, _preload_content=False)
        return json.loads(resp.data)

    return get


def _quantity(value: object, what: str) -> int:
    from kubernetes.utils import parse_quantity

    try:
        return int(parse_quantity(str(value)))
    except ValueError as exc:
        raise PrepareError(f"consumed capacity {what}={value!r} is not a quantity") from exc


def slice_config_of(
    uid: str, devices: list[PreparedDevice], context_floor: dict[str, int] | None = None
) -> sliceconfig.SliceConfig:
    """The limits the core enforces; SliceConfig validates them as strictly as the core.

    context_floor: measured context footprint per GPU UUID (discovery); a GPU without a
    measurement gets the conservative default."""
    floors = context_floor or {}
    return sliceconfig.SliceConfig(
        claim=uid,
        devices=tuple(
            sliceconfig.DeviceSlice(
                d.uuid,
                d.memory_bytes,
                d.compute_percent,
                floors.get(d.uuid) or sliceconfig.DEFAULT_CONTEXT_FLOOR_BYTES,
            )
            for d in devices
        ),
    )


def _write_root_readonly(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    if os.geteuid() == 0:
        os.chown(tmp, 0, 0)
    os.chmod(tmp, 0o444)  # the tenant's container may read its limits, never change them
    os.replace(tmp, path)


class Preparer:
    """Thread-safe prepare/unprepare for one node's GPUs."""

    def __init__(
        self,
        node: str,
        gpus: list[GpuInfo],
        layout: Layout,
        claims: ClaimSource,
        unhealthy: Callable[[], Collection[str]] = frozenset,
    ) -> None:
        self.node = node
        self.gpus = {g.device_name: g for g in gpus}
        self.layout = layout
        self.claims = claims
        # UUIDs of the GPUs the health monitor holds failed. A scheduler whose ResourceSlice
        # view predates the device's taint can still allocate it; such a claim is refused here
        # so its pod never runs on a failed GPU (the taint's eviction then frees it for a
        # healthy one).
        self.unhealthy = unhealthy
        self.checkpoint = Checkpoint(layout.checkpoint)
        self._lock = threading.Lock()  # one claim at a time: files and checkpoint stay coherent

    def _devices_of(self, claim: dict, uid: str) -> list[PreparedDevice]:
        meta = claim.get("metadata", {})
        ns_name = f"{meta.get('namespace')}/{meta.get('name')}"
        if meta.get("uid") != uid:
            raise PrepareError(
                f"claim {ns_name} has UID {meta.get('uid')}, kubelet asked for {uid}: "
                "it was deleted and recreated; the kubelet will retry with the new one"
            )
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            raise PrepareError(f"claim {ns_name} is not allocated yet")
        results = [
            r
            for r in allocation.get("devices", {}).get("results", [])
            if r.get("driver") == DRIVER and r.get("pool") == self.node
        ]
        if not results:
            raise PrepareError(f"claim {ns_name} has no device of {DRIVER} on node {self.node}")
        devices = []
        for r in results:
            gpu = self.gpus.get(r["device"])
            if gpu is None:
                raise PrepareError(f"device {r['device']} of claim {ns_name} is not on this node")
            if gpu.uuid in self.unhealthy():
                raise PrepareError(
                    f"device {r['device']} ({gpu.uuid}) of claim {ns_name} has failed and is "
                    "tainted: the pod is evicted and scheduled again on a healthy GPU"
                )
            used = r.get("consumedCapacity") or {}
            if "memory" not in used or "cores" not in used:
                raise PrepareError(
                    f"claim {ns_name} has no consumed memory/cores on {r['device']}: "
                    "refusing to run a container without limits"
                )
            share = r.get("shareID") or ""
            devices.append(
                PreparedDevice(
                    request=r.get("request", ""),
                    pool=r["pool"],
                    device=r["device"],
                    uuid=gpu.uuid,
                    share_id=share,
                    memory_bytes=_quantity(used["memory"], "memory"),
                    compute_percent=_quantity(used["cores"], "cores"),
                    cdi_id=cdi.cdi_device_id(f"{uid}-{r['device']}"),
                )
            )
        return devices

    def prepare(self, namespace: str, name: str, uid: str) -> PreparedClaim:
        """Prepare one claim (idempotent per UID); raises PrepareError with a reason."""
        with self._lock:
            done = self.checkpoint.get(uid)
            if done is not None:
                return done
            claim = self.claims(namespace, name)
            devices = self._devices_of(claim, uid)
            lay = self.layout
            if not lay.preload_file.exists():
                _write_root_readonly(lay.preload_file, cdi.preload_line())
            config = lay.config_file(uid)
            try:
                floors = {g.uuid: g.context_bytes for g in self.gpus.values()}
                text = sliceconfig.render(slice_config_of(uid, devices, floors))
            except sliceconfig.SliceConfigError as exc:
                raise PrepareError(f"claim {namespace}/{name}: {exc}") from exc
            _write_root_readonly(config, text)
            region = lay.region_dir(uid)
            region.mkdir(parents=True, exist_ok=True)
            # The core writes the region as the container's user, root or not (the documented
            # manifest runs as uid 1000); only this claim's containers mount the folder.
            os.chmod(region, 0o777)  # noqa: S103
            sim = lay.sim_driver(uid)
            if sim is not None:
                # simgpu's shared state is the simulated device memory: every process on the
                # node, whatever its user, maps it read-write as it would open /dev/nvidia*.
                Path(sim.state).touch(mode=0o666)
                os.chmod(sim.state, 0o666)  # noqa: S103
                # One file per allocated GPU: simgpu in the container sees only these.
                lay.device_dir(uid).mkdir(parents=True, exist_ok=True)
                for d in devices:
                    _write_root_readonly(
                        lay.device_dir(uid) / f"simgpu{self.gpus[d.device].index}", d.uuid + "\n"
                    )
            spec = cdi.render_cdi_spec(
                uid,
                [
                    cdi.CdiDevice(
                        name=d.cdi_id.split("=", 1)[1],
                        uuid=d.uuid,
                        minor=None if lay.simulate else self.gpus[d.device].minor,
                        index=self.gpus[d.device].index,
                    )
                    for d in devices
                ],
                cdi.ClaimFiles(
                    core_library=str(lay.core_library),
                    preload_file=str(lay.preload_file),
                    config_file=str(config),
                    region_dir=str(region),
                ),
                sim,
            )
            path = cdi.spec_path(lay.cdi_dir, uid)
            cdi.write_spec(path, spec)
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            prepared = PreparedClaim(
                uid=uid,
                namespace=namespace,
                name=name,
                devices=tuple(devices),
                config_path=str(config),
                cdi_path=str(path),
                region_dir=str(region),
                pods=tuple(
                    f"{namespace}/{r['name']}/{r.get('uid', '')}"
                    for r in reserved
                    if r.get("resource") == "pods"
                ),
            )
            self.checkpoint.put(prepared)  # last: a crash before this re-prepares cleanly
            log.info("prepared claim %s/%s (%s): %d device(s)", namespace, name, uid, len(devices))
            return prepared

    def unprepare(self, uid: str) -> None:
        """Remove the claim's spec, config and region; unknown UIDs are already done."""
        with self._lock:
            done = self.checkpoint.get(uid)
            if done is None:
                return
            Path(done.cdi_path).unlink(missing_ok=True)
            shutil.rmtree(Path(done.config_path).parent, ignore_errors=True)
            shutil.rmtree(done.region_dir, ignore_errors=True)
            self.checkpoint.remove(uid)  # last: a crash before this retries the removal
            log.info("unprepared claim %s/%s (%s)", done.namespace, done.name, uid)
