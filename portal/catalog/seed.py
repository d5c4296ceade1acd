"""The reference catalogue: Tesla V100-PCIE-32GB slices of 8/16/32 GiB at 25/50/100 %."""

from __future__ import annotations

from decimal import Decimal

from django.db import transaction

from portal.catalog.models import GpuModel, Product
from portal.core.seeding import seeder
from tranche.names import device_class_name

V100_PRODUCTS = [
    # (size GiB, percent, monthly EUR)
    (8, 25, Decimal("90.00")),
    (16, 50, Decimal("170.00")),
    (32, 100, Decimal("320.00")),
]


def _ensure_line(model: tuple, label: str, products: list[tuple]) -> list[Product]:
    """Create one GPU model and its slice products if missing (idempotent; never overwrites
    prices). `model`: (name, short name, memory MiB, compute capability, architecture);
    `label` opens each product's name."""
    name, short_name, memory_mib, compute_capability, architecture = model
    gpu, _ = GpuModel.objects.get_or_create(
        name=name,
        defaults={
            "short_name": short_name,
            "memory_mib": memory_mib,
            "compute_capability": compute_capability,
            "architecture": architecture,
        },
    )
    created = []
    for gib, percent, monthly in products:
        product, _ = Product.objects.get_or_create(
            device_class=device_class_name(short_name, gib),
            defaults={
                "gpu_model": gpu,
                "name": f"{label} {gib} GiB slice ({percent} %)",
                "fraction_percent": percent,
                "memory_mib": gib * 1024,
                "compute_percent": percent,
                "monthly_price": monthly,
                "currency": "EUR",
            },
        )
        created.append(product)
    return created


V100_MODEL = ("Tesla V100-PCIE-32GB", "v100", 32768, "7.0", "Volta")


@transaction.atomic
def ensure_catalogue() -> list[Product]:
    """Create the V100 model and products if missing (idempotent; never overwrites prices)."""
    return _ensure_line(V100_MODEL, "V100", V100_PRODUCTS)


A100_PRODUCTS = [(10, 25, Decimal("140.00"))]
A100_MODEL = ("NVIDIA A100-SXM4-40GB", "a100", 40960, "8.0", "Ampere")


@transaction.atomic
def ensure_a100_line() -> list[Product]:
    """An A100 (compute capability 8.0) line: images that dropped Volta still run there."""
    return _ensure_line(A100_MODEL, "A100", A100_PRODUCTS)


@seeder
def seed_catalogue(password: str) -> list[str]:
    """Demo seeder: the V100 catalogue."""
    products = ensure_catalogue() + ensure_a100_line()
    return [f"Catalogue: {', '.join(p.device_class for p in products)}"]
