"""SLA settings of billing: each product's SLA (target and credit schedule, edited by billing
staff in the admin). Imported by `billing.models` so Django finds them; written only by
`billing.sla_admin` (audited). The outages they credit are the cluster's (`cluster.outages`)."""

from __future__ import annotations

from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from portal.catalog.models import Product

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
