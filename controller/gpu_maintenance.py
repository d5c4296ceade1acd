"""Support's maintenance marks made Kubernetes objects: one DeviceTaintRule per GPU out for
maintenance (controller/render/device_taint_rule.py), none for the others.

`sync_gpu_maintenance(applier)` is level-triggered and idempotent: it reads every GPU's newest
mark (`controller.desired.gpus_in_maintenance`), finds each one's device in its node's
ResourceSlice (`controller.observe.device_of_gpu`: the device whose `uuid` attribute is the
GPU's), applies the rules that are
missing or differ and deletes the managed rules no longer wanted (a GPU back in service).
A GPU whose node publishes no such device keeps no rule and is logged (its node is gone or
its agent not running); the next sync, after any mark, tries again.
"""

from __future__ import annotations

import logging

from controller import desired
from controller.apply import Applier
from controller.observe import device_of_gpu
from controller.render.device_taint_rule import COMPONENT, render_maintenance_rule
from tranche.names import LABEL_COMPONENT

log = logging.getLogger(__name__)
RULE = ("resource.k8s.io/v1", "DeviceTaintRule")
SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def device_of(applier: Applier, node: str, gpu_uuid: str) -> str | None:
    """The DRA device name (e.g. "gpu-2") of `gpu_uuid` in `node`'s pool; None if absent."""
    slices = applier.list_path(SLICES, field_selector=f"spec.nodeName={node}")
    return device_of_gpu(slices, gpu_uuid)


def sync_gpu_maintenance(applier: Applier) -> list[str]:
    """Make the maintenance rules match support's marks; the changes made."""
    wanted = []
    for mark in desired.gpus_in_maintenance():
        device = device_of(applier, mark.node, mark.gpu)
        if device is None:
            log.warning("GPU %s of node %s is out for maintenance but its node publishes no such "
                        "device: no taint rule until it does", mark.gpu, mark.node)  # fmt: skip
            continue
        wanted.append(render_maintenance_rule(mark.node, device, mark.gpu))
    live = {RULE: applier.list_managed(*RULE, selector=f"{LABEL_COMPONENT}={COMPONENT}")}
    changes = applier.sync(wanted, live)
    for change in changes:
        log.info("gpu maintenance: %s", change)
    return changes
