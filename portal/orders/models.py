"""Subscription (project x product x quantity: the entitlement) and Order (the only way to change
it, with a state machine, conditions and history). What the cluster says of them (slices in
use) is observed state: `portal.cluster.models.ProjectUsage`.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.utils import timezone

from portal.catalog.models import Product
from portal.tenants.models import Organization, Project
from tranche import orders

MAX_SLICES_PER_PRODUCT = 16


class Subscription(models.Model):
    """How many slices of one product a project is entitled to hold at once (0 = none)."""

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="subscriptions")
    product = models.ForeignKey(Product, on_delete=models.PROTECT, related_name="subscriptions")
    quantity = models.PositiveSmallIntegerField(default=0)
    version = models.PositiveIntegerField(default=0, help_text="Bumped by every order (CAS).")
    conditions = models.JSONField(
        default=list,
        blank=True,
        help_text="Ready/Provisioning/Failed as the controller last reported them "
        "(observedGeneration = version).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "product"], name="one_sub_per_product"),
            models.CheckConstraint(
                condition=models.Q(quantity__lte=MAX_SLICES_PER_PRODUCT), name="sub_quantity_max"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project} x {self.product.device_class} x {self.quantity}"


class Order(models.Model):
    """A buy, resize or cancel of one subscription; state changes are compare-and-swap."""

    class Kind(models.TextChoices):
        BUY = orders.BUY, "Buy"
        RESIZE = orders.RESIZE, "Resize"
        CANCEL = orders.CANCEL, "Cancel"

    class State(models.TextChoices):
        PENDING = orders.PENDING, "Pending"
        PROVISIONING = orders.PROVISIONING, "Provisioning"
        ACTIVE = orders.ACTIVE, "Active"
        FAILED = orders.FAILED, "Failed"
        CANCELLING = orders.CANCELLING, "Cancelling"
        CANCELLED = orders.CANCELLED, "Cancelled"

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT)
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="orders")
    product = models.ForeignKey(Product, on_delete=models.PROTECT)
    subscription = models.ForeignKey(Subscription, on_delete=models.PROTECT, related_name="orders")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    from_quantity = models.PositiveSmallIntegerField()
    quantity = models.PositiveSmallIntegerField(help_text="Target quantity of the subscription.")
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    failure_reason = models.CharField(max_length=64, blank=True)
    failure_message = models.CharField(max_length=500, blank=True)
    conditions = models.JSONField(default=list, blank=True)
    generation = models.PositiveIntegerField(default=1)
    idempotency_key = models.CharField(max_length=64)
    unit_monthly_price = models.DecimalField(max_digits=10, decimal_places=2)
    monthly_total = models.DecimalField(max_digits=12, decimal_places=2)
    prorata_charge = models.DecimalField(max_digits=12, decimal_places=2)
    # what the order added to the month's invoice tax (the confirmed gross is charge + tax)
    prorata_tax = models.DecimalField(max_digits=12, decimal_places=2, default=Decimal("0.00"))
    tax_rate_percent = models.DecimalField(max_digits=5, decimal_places=2, default=Decimal("0"))
    currency = models.CharField(max_length=3)
    placed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    # the instant the order was priced at (its quote's), so quote and bill share one hour
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "idempotency_key"], name="order_idempotency_per_org"
            )
        ]

    def __str__(self) -> str:
        return f"Order #{self.pk} {self.kind} {self.product.device_class} → {self.quantity}"

    @property
    def prorata_gross(self) -> Decimal:
        return self.prorata_charge + self.prorata_tax


class OrderEvent(models.Model):
    """One entry of an order's history (placement and each state change)."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(auto_now_add=True)
    from_state = models.CharField(max_length=16, blank=True)
    to_state = models.CharField(max_length=16)
    actor_label = models.CharField(max_length=200)
    message = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.from_state or '∅'} → {self.to_state}"
