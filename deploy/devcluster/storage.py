"""Storage for the demo: the local control plane has no volume provisioner, so the sample
manifest's PersistentVolumeClaim (model files) would leave pods Pending forever.

`ensure_demo_volumes` creates a default StorageClass without a provisioner and a pool of static
PersistentVolumes that Kubernetes' own binder hands to claims. kwok never mounts them; they only
let the scheduler do its real volume-binding work. Idempotent: existing objects are left alone.
"""

from __future__ import annotations

import time

from kubernetes import client
from kubernetes.client.rest import ApiException

STORAGE_CLASS = "tranche-demo"
LABEL = {"app.kubernetes.io/managed-by": "tranche-devcluster"}


def _create(fn, body) -> bool:
    try:
        fn(body)
    except ApiException as exc:
        if exc.status == 409:  # already there
            return False
        raise
    return True


def _recycle_released(core: client.CoreV1Api) -> set[str]:
    """Delete volumes whose claim is gone (Released/Failed) so they are created afresh below;
    without this a long-lived dev cluster runs out of volumes after a few test runs. Returns the
    names deleted."""
    recycled: set[str] = set()
    selector = ",".join(f"{k}={v}" for k, v in LABEL.items())
    for volume in core.list_persistent_volume(label_selector=selector).items:
        if volume.status and volume.status.phase in ("Released", "Failed"):
            try:
                core.delete_persistent_volume(volume.metadata.name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
            recycled.add(volume.metadata.name)
    return recycled


def _wait_gone(core: client.CoreV1Api, names: set[str], timeout: float = 15.0) -> None:
    """Deletion waits for the pv-protection finalizer; recreating before it is gone meets a 409
    and the volume would only be made by the next call."""
    deadline = time.monotonic() + timeout
    for name in names:
        while time.monotonic() < deadline:
            try:
                core.read_persistent_volume(name)
            except ApiException as exc:
                if exc.status == 404:
                    break
                raise
            time.sleep(0.2)  # polling the API server for the deletion, not a test sleep


def ensure_demo_volumes(api: client.ApiClient, count: int = 16, size: str = "100Gi") -> int:
    """Make sure the default StorageClass and `count` static volumes exist; returns how many
    objects were missing (a released volume recreated in place is a replacement, not counted:
    claims of other sessions on a shared dev cluster are released at any time)."""
    storage = client.StorageV1Api(api)
    core = client.CoreV1Api(api)
    created = int(
        _create(
            storage.create_storage_class,
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {
                    "name": STORAGE_CLASS,
                    "labels": LABEL,
                    "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
                },
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "Immediate",
                "reclaimPolicy": "Retain",
            },
        )
    )
    recycled = _recycle_released(core)
    _wait_gone(core, recycled)
    for i in range(count):
        name = f"tranche-demo-pv-{i:02d}"
        made = _create(
            core.create_persistent_volume,
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name, "labels": LABEL},
                "spec": {
                    "storageClassName": STORAGE_CLASS,
                    "capacity": {"storage": size},
                    "accessModes": ["ReadWriteOnce"],
                    # Retain + recycling below: nothing here can wipe a hostPath volume.
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": f"/var/lib/tranche-demo/pv-{i:02d}"},
                },
            },
        )
        created += made and name not in recycled
    return created
