"""Billing records: billing accounts, invoices with their lines, credit notes and the gapless
number counters. Written only through `billing.services`; money is Decimal, rounded by
`tranche.money`. The claim ledger invoices are priced from lives in `portal.cluster`."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from portal.catalog.models import Product
from portal.tenants.models import Organization, Project


class BillingAccount(models.Model):
    """How an organization is billed: buyer details, currency and tax rate."""

    organization = models.OneToOneField(
        Organization, on_delete=models.CASCADE, related_name="billing_account"
    )
    legal_name = models.CharField(max_length=200, blank=True)
    address = models.TextField(blank=True)
    vat_id = models.CharField(max_length=32, blank=True)
    email = models.EmailField(blank=True)
    currency = models.CharField(
        max_length=3, default="EUR", validators=[RegexValidator(r"^[A-Z]{3}$", "ISO 4217 code")]
    )
    tax_rate_percent = models.DecimalField(
        max_digits=5,
        decimal_places=2,
        default=Decimal("20.00"),
        validators=[MinValueValidator(Decimal("0")), MaxValueValidator(Decimal("100"))],
    )

    def __str__(self) -> str:
        return f"Billing account of {self.organization}"


class DocumentCounter(models.Model):
    """The last number used in one series and year; locked while a number is taken (gapless)."""

    series = models.CharField(max_length=8)
    year = models.PositiveSmallIntegerField()
    last_number = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["series", "year"], name="one_counter_per_series_year")
        ]

    def __str__(self) -> str:
        return f"{self.series} {self.year}: {self.last_number}"


class ImmutableInvoiceError(Exception):
    """An attempt to edit an issued invoice or its lines (credit it instead)."""


class Invoice(models.Model):
    """One organization's invoice for one calendar month (UTC). Numbered when issued; an issued
    invoice is never edited: it is paid, voided (its number stays used) or credited."""

    class State(models.TextChoices):
        DRAFT = "draft", "Draft"
        ISSUED = "issued", "Issued"
        PAID = "paid", "Paid"
        VOID = "void", "Void"

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+")
    year = models.PositiveSmallIntegerField()
    month = models.PositiveSmallIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(12)]
    )
    state = models.CharField(max_length=8, choices=State.choices, default=State.DRAFT)
    series = models.CharField(max_length=8, default="INV")
    number_year = models.PositiveSmallIntegerField(null=True, blank=True)
    number = models.PositiveIntegerField(null=True, blank=True)
    currency = models.CharField(max_length=3)
    tax_rate_percent = models.DecimalField(max_digits=5, decimal_places=2)
    seller = models.JSONField(default=dict)
    buyer = models.JSONField(default=dict)
    net_total = models.DecimalField(max_digits=14, decimal_places=2)
    tax_total = models.DecimalField(max_digits=14, decimal_places=2)
    total = models.DecimalField(max_digits=14, decimal_places=2)
    created_at = models.DateTimeField(auto_now_add=True)
    issued_at = models.DateTimeField(null=True, blank=True)
    paid_at = models.DateTimeField(null=True, blank=True)
    voided_at = models.DateTimeField(null=True, blank=True)
    void_reason = models.CharField(max_length=200, blank=True)
    # the voided invoice of the same month this one replaces (printed and exported with it)
    corrects = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="corrected_by"
    )

    class Meta:
        ordering = ["-year", "-month", "-id"]
        constraints = [
            # a void leaves the month open for its corrected invoice
            models.UniqueConstraint(
                fields=["organization", "year", "month"],
                condition=~models.Q(state="void"),
                name="one_live_invoice_per_org_month",
            ),
            models.UniqueConstraint(
                fields=["series", "number_year", "number"], name="invoice_number_unique"
            ),
        ]

    def __str__(self) -> str:
        return self.display_number or f"Draft invoice {self.year}-{self.month:02d}"

    def save(self, *args, **kwargs) -> None:
        """Only a draft is ever saved whole; an issued invoice changes state by the services'
        compare-and-swap updates (state, dates, void reason), never its content."""
        if self.pk and Invoice.objects.filter(pk=self.pk).exclude(state=self.State.DRAFT).exists():
            raise ImmutableInvoiceError(f"Invoice {self} is issued: it is never edited.")
        super().save(*args, **kwargs)

    @property
    def display_number(self) -> str:
        return f"{self.series}-{self.number_year}-{self.number:06d}" if self.number else ""


class InvoiceLine(models.Model):
    """One priced line: a full month or a pro-ration (negative: a credit) of one subscription."""

    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="lines")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+")
    product = models.ForeignKey(Product, on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(max_length=8)
    description = models.CharField(max_length=300)
    delta = models.SmallIntegerField()
    quantity = models.PositiveSmallIntegerField()
    unit_monthly_price = models.DecimalField(max_digits=10, decimal_places=2)
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    hours = models.PositiveIntegerField()
    amount = models.DecimalField(max_digits=14, decimal_places=2)

    class Meta:
        ordering = ["project_id", "product_id", "period_start", "id"]

    def __str__(self) -> str:
        return self.description

    def save(self, *args, **kwargs) -> None:
        if self.invoice_id and self.invoice.state != Invoice.State.DRAFT:
            raise ImmutableInvoiceError(f"Invoice {self.invoice} is issued: its lines are final.")
        super().save(*args, **kwargs)


class CreditNote(models.Model):
    """A credit against an issued (or paid) invoice, with its reason; numbered when created."""

    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="credit_notes")
    series = models.CharField(max_length=8, default="CN")
    number_year = models.PositiveSmallIntegerField()
    number = models.PositiveIntegerField()
    reason = models.CharField(max_length=300)
    net_amount = models.DecimalField(max_digits=14, decimal_places=2)
    tax_amount = models.DecimalField(max_digits=14, decimal_places=2)
    total = models.DecimalField(max_digits=14, decimal_places=2)
    currency = models.CharField(max_length=3)
    issued_at = models.DateTimeField()
    issued_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-issued_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["series", "number_year", "number"], name="credit_note_number_unique"
            )
        ]

    def __str__(self) -> str:
        return self.display_number

    @property
    def display_number(self) -> str:
        return f"{self.series}-{self.number_year}-{self.number:06d}"


from portal.billing.sla_models import ProductSla, SlaCreditTier  # noqa: E402,F401
