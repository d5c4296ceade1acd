"""SLA records of billing: each product's SLA setting (target and credit schedule, edited by
billing staff in the admin) and each slice's outage (the downtime the month run credits).
Imported by `billing.models` so Django finds them; written only by `billing.sla_admin` (the
settings, audited) and `billing.downtime` (the outages)."""

from __future__ import annotations

from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from portal.agents.models import GpuHealthEvent
from portal.catalog.models import Product
from portal.cluster.models import UsageRecord
from portal.tenants.models import Organization, Project

PERCENT = [MinValueValidator(Decimal("0.001")), MaxValueValidator(Decimal("100"))]


class ProductSla(models.Model):
    """A product's availability target; its credit schedule is its `tiers`."""

    product = models.OneToOneField(Product, on_delete=models.CASCADE, related_name="sla")
    target_percent = models.DecimalField(
        max_digits=6, decimal_places=3, validators=PERCENT, help_text="e.g. 99.500"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "product SLA"

    def __str__(self) -> str:
        return f"SLA of {self.product}: {self.target_percent} %"


class SlaCreditTier(models.Model):
    """Below `below_percent` availability in a month, credit `credit_percent` of the slice's
    month charge (the lowest threshold reached wins)."""

    sla = models.ForeignKey(ProductSla, on_delete=models.CASCADE, related_name="tiers")
    below_percent = models.DecimalField(max_digits=6, decimal_places=3, validators=PERCENT)
    credit_percent = models.DecimalField(max_digits=6, decimal_places=3, validators=PERCENT)

    class Meta:
        ordering = ["-below_percent"]
        constraints = [
            models.UniqueConstraint(fields=["sla", "below_percent"], name="one_tier_per_threshold")
        ]

    def __str__(self) -> str:
        return f"below {self.below_percent} % -> {self.credit_percent} %"


class SliceOutage(models.Model):
    """One slice's downtime: from its GPU's taint (the fatal XID's health event naming its pod)
    until the replacement pod runs (`ended_at`; null: not yet, the period's end counts). The
    slice is the allocated claim (`usage_record`): pods sharing one claim share one outage."""

    health_event = models.OneToOneField(GpuHealthEvent, on_delete=models.PROTECT, related_name="+")
    usage_record = models.ForeignKey(
        UsageRecord, on_delete=models.PROTECT, related_name="+", null=True, blank=True
    )
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+")
    product = models.ForeignKey(Product, on_delete=models.PROTECT, related_name="+")
    pod_name = models.CharField(max_length=253)
    started_at = models.DateTimeField(db_index=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    replacement_pod = models.CharField(max_length=253, blank=True)

    class Meta:
        ordering = ["-started_at", "-pk"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(ended_at__isnull=True)
                | models.Q(ended_at__gte=models.F("started_at")),
                name="outage_ends_after_start",
            ),
            models.UniqueConstraint(
                fields=["usage_record"],
                condition=models.Q(ended_at__isnull=True),
                name="one_open_outage_per_claim",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.pod_name} down from {self.started_at:%Y-%m-%d %H:%M:%S}"
