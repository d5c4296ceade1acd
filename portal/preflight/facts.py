"""What the checks look at, gathered beforehand: plain frozen data, so every check is pure.

`gather.py` fills these from the cluster and the registry; tests build them by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ProductFacts:
    """A product the project can claim, as the checks need it."""

    device_class: str
    name: str
    gpu_name: str
    compute_capability: str
    memory_mib: int
    compute_percent: int
    # One CUDA context's device memory on this GPU model as node agents measured it; None
    # until one reports it (the lint then charges what the core charges an unmeasured GPU).
    context_mib: int | None = None


@dataclass(frozen=True)
class QuotaFacts:
    """The project's ResourceQuota as the API server counts it (raw quantities)."""

    name: str
    hard: dict[str, str]
    used: dict[str, str]


@dataclass(frozen=True)
class CapacityFacts:
    """Per DeviceClass: GPUs of that model online, and how many more slices fit on them now."""

    compatible_gpus: dict[str, int]
    free_slices: dict[str, int]


@dataclass(frozen=True)
class AdmissionResult:
    """The API server's answer to a server-side dry run of one object."""

    subject: str
    allowed: bool
    status: int = 200
    reason: str = ""
    message: str = ""
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImageFacts:
    """What the image's files say about GPU code (SASS archs and PTX targets as ints, 70 = 7.0)."""

    image: str
    digest: str = ""
    error: str = ""
    # The registry answered that the image (name or tag) does not exist: every pull will fail.
    missing: bool = False
    bound_reached: bool = False
    bytes_read: int = 0
    gpu_files: tuple[str, ...] = ()
    sass: tuple[int, ...] = ()
    ptx: tuple[int, ...] = ()


@dataclass(frozen=True)
class Facts:
    objects: list[dict[str, Any]]
    namespace: str
    products: dict[str, ProductFacts]
    quota: QuotaFacts | None = None
    capacity: CapacityFacts | None = None
    admission: tuple[AdmissionResult, ...] = ()
    images: dict[str, ImageFacts] = field(default_factory=dict)
    # PersistentVolumeClaim name -> phase ("Bound", "Pending"; "" when it does not exist yet)
    volume_claims: dict[str, str] = field(default_factory=dict)
