"""GPU models (as NVML names them) and Products: a fixed slice of one model with its prices."""

from __future__ import annotations

from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from tranche.products import ProductSpec


class GpuModel(models.Model):
    """A physical GPU model, named exactly as NVML reports it."""

    name = models.CharField(max_length=100, unique=True, help_text="e.g. Tesla V100-PCIE-32GB")
    short_name = models.SlugField(max_length=16, unique=True, help_text="e.g. v100")
    memory_mib = models.PositiveIntegerField()
    compute_capability = models.CharField(
        max_length=8, validators=[RegexValidator(r"^\d+\.\d+$", "Use the form 7.0")]
    )
    architecture = models.CharField(max_length=32, help_text="e.g. Volta")

    def __str__(self) -> str:
        return self.name


class Product(models.Model):
    """A fixed slice of one GPU model; its DeviceClass is `tranche-<gpu>-<size>`."""

    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="products")
    name = models.CharField(max_length=80)
    fraction_percent = models.PositiveSmallIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(100)]
    )
    memory_mib = models.PositiveIntegerField()
    compute_percent = models.PositiveSmallIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(100)]
    )
    device_class = models.CharField(
        max_length=63,
        unique=True,
        validators=[RegexValidator(r"^tranche-[a-z0-9]+-[a-z0-9]+$", "Use tranche-<gpu>-<size>")],
    )
    monthly_price = models.DecimalField(
        max_digits=10, decimal_places=2, validators=[MinValueValidator(Decimal("0"))]
    )
    currency = models.CharField(
        max_length=3, default="EUR", validators=[RegexValidator(r"^[A-Z]{3}$", "ISO 4217 code")]
    )
    sellable = models.BooleanField(default=True)

    class Meta:
        ordering = ["gpu_model__name", "memory_mib"]

    def __str__(self) -> str:
        return self.name

    @property
    def memory_gib_label(self) -> str:
        gib = self.memory_mib / 1024
        return f"{gib:g} GiB"

    def spec(self) -> ProductSpec:
        """The plain data the pure manifest renderers take."""
        return ProductSpec(
            device_class=self.device_class,
            memory_mib=self.memory_mib,
            compute_percent=self.compute_percent,
            gpu_name=self.gpu_model.name,
            compute_capability=self.gpu_model.compute_capability,
        )
