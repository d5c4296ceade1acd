"""GPU factories shared by every tier: a V100 as simgpu reports it, and a claim in the exact JSON
shape the API server returns for an allocated ResourceClaim."""

from __future__ import annotations

from nodeagent.discovery import GpuInfo

NODE = "kwok-gpu-0"


def v100(index: int) -> GpuInfo:
    return GpuInfo(
        index=index,
        minor=index,
        name="Tesla V100-PCIE-32GB",
        uuid=f"GPU-00000000-0000-0000-0000-00000000000{index}",
        memory_bytes=32 * 1024**3,
        compute_capability="7.0",
        architecture="Volta",
        driver_version="550.54.15",
        cuda_version="12.4",
        sm_count=80,
        mig_enabled=False,
        context_bytes=16 * 1024**2,  # what discovery measures on the simgpu the tests configure
    )


def allocated_claim(
    uid: str, device: str = "gpu-1", memory: str = "8Gi", cores: str = "25", pod_uid: str = "p-1"
):
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "pod-a-gpu-x7k2", "namespace": "acme-ml", "uid": uid},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": "gpu.tranche.dev",
                            "pool": NODE,
                            "device": device,
                            "shareID": "3f1c0d2e-8f43-4d8e-9b8c-2a1d5e6f7a8b",
                            "consumedCapacity": {"memory": memory, "cores": cores},
                        }
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": "pod-a", "uid": pod_uid}],
        },
    }
