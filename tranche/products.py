"""A slice product as Kubernetes sees it (the one `ProductSpec`), and its quantities."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProductSpec:
    """One slice product: its DeviceClass, memory and compute share of one GPU model.

    The portal builds it from a catalogue row (`Product.spec()`), the controller renders
    DeviceClasses, quotas and claim templates from it, and tests construct it by hand."""

    device_class: str
    memory_mib: int
    compute_percent: int
    gpu_name: str = ""
    compute_capability: str = ""


def memory_quantity(memory_mib: int) -> str:
    """Canonical Kubernetes quantity for MiB: whole GiB as `8Gi`, else `<n>Mi`."""
    if memory_mib % 1024 == 0:
        return f"{memory_mib // 1024}Gi"
    return f"{memory_mib}Mi"


def cpu_quantity(millicores: int) -> str:
    """Canonical Kubernetes quantity for CPU: whole cores as `8`, else `<n>m`."""
    if millicores % 1000 == 0:
        return str(millicores // 1000)
    return f"{millicores}m"


def claim_capacity(product: ProductSpec) -> dict[str, str]:
    """The exact capacity requests of one slice of `product`."""
    return {"memory": memory_quantity(product.memory_mib), "cores": str(product.compute_percent)}
