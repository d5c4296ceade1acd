"""The kinds of the agents' GPU health findings (nodeagent/health.py), named once: the agent
sends them, the portal stores, shows and counts them, the slice outages open from them.

The GPU's own findings (subject: its UUID) are support's; the pod ones are the tenant's."""

from __future__ import annotations

GPU_FAILED = "gpu-failed"  # a fatal XID / ECC error / GPU lost: the device is tainted NoExecute
GPU_RECOVERED = "gpu-recovered"  # answers again after a reset, or marked in service
GPU_XID_UNKNOWN = "gpu-xid-unknown"  # an XID the catalogue does not know: reported, not drained
POD_GPU_FAILED = "pod-gpu-failed"  # a pod whose GPU failed (Kubernetes evicts it): an outage
POD_XID = "pod-xid"  # an application XID of one of the pod's processes

HEALTH_KINDS = (GPU_FAILED, GPU_RECOVERED, GPU_XID_UNKNOWN, POD_GPU_FAILED, POD_XID)
TENANT_KINDS = (POD_GPU_FAILED, POD_XID)  # those naming a tenant's pod
