"""FOCUS (FinOps Open Cost and Usage Specification) 1.0 CSV of issued invoices and credit notes.

FOCUS 1.0 is the newest version the PyPI `focus-validator` (1.0.0) validates; the columns are
its required set. One row per invoice line (a full month or pro-ration is a Recurring Purchase,
a decrease a Recurring Credit), one Tax row per invoice, and one Credit/Correction row (plus its
tax) per credit note. Drafts and void invoices are not billed, so not exported. Costs are the
billed amounts (no discounts: list = contracted = effective = billed).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from decimal import Decimal
from io import StringIO

from portal.billing.models import CreditNote, Invoice
from portal.tenants.models import Organization
from tranche import pricing

COLUMNS = [
    "AvailabilityZone", "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency",
    "BillingPeriodEnd", "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription",
    "ChargeFrequency", "ChargePeriodEnd", "ChargePeriodStart", "CommitmentDiscountCategory",
    "CommitmentDiscountId", "CommitmentDiscountName", "CommitmentDiscountStatus",
    "CommitmentDiscountType", "ConsumedQuantity", "ConsumedUnit", "ContractedCost",
    "ContractedUnitPrice", "EffectiveCost", "InvoiceIssuer", "ListCost", "ListUnitPrice",
    "PricingCategory", "PricingQuantity", "PricingUnit", "Provider", "Publisher", "RegionId",
    "RegionName", "ResourceID", "ResourceName", "ResourceType", "ServiceCategory", "ServiceName",
    "SkuId", "SkuPriceId", "SubAccountId", "SubAccountName", "Tags",
]  # fmt: skip
BILLED = (Invoice.State.ISSUED, Invoice.State.PAID)


def _ts(value) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def _base(invoice: Invoice, cost: Decimal) -> dict[str, str]:
    seller = invoice.seller.get("name") or "Tranche"
    return {
        "BilledCost": str(cost),
        "BillingAccountId": invoice.buyer.get("organization", ""),
        "BillingAccountName": invoice.buyer.get("name", ""),
        "BillingCurrency": invoice.currency,
        "BillingPeriodStart": _ts(pricing.month_start(invoice.year, invoice.month)),
        "BillingPeriodEnd": _ts(pricing.month_end(invoice.year, invoice.month)),
        "ChargeFrequency": "Recurring",
        "ChargePeriodStart": _ts(pricing.month_start(invoice.year, invoice.month)),
        "ChargePeriodEnd": _ts(pricing.month_end(invoice.year, invoice.month)),
        "ContractedCost": str(cost),
        "EffectiveCost": str(cost),
        "ListCost": str(cost),
        "InvoiceIssuer": seller,
        "Provider": seller,
        "Publisher": seller,
        "ServiceCategory": "Compute",
        "ServiceName": "GPU slices",
        "Tags": json.dumps({"tranche/invoice": str(invoice)}),
    }


def invoice_rows(invoice: Invoice) -> Iterator[dict[str, str]]:
    hours = pricing.hours_in_month(invoice.year, invoice.month)
    for line in invoice.lines.all():
        row = _base(invoice, line.amount)
        row.update(
            {
                "ChargeCategory": "Credit" if line.amount < 0 else "Purchase",
                "ChargeDescription": line.description,
                "ChargePeriodStart": _ts(line.period_start),
                "ChargePeriodEnd": _ts(line.period_end),
                "ContractedUnitPrice": str(line.unit_monthly_price),
                "ListUnitPrice": str(line.unit_monthly_price),
                "PricingCategory": "Standard",
                "PricingQuantity": str(
                    (Decimal(line.delta * line.hours) / hours).quantize(Decimal("0.000001"))
                ),
                "PricingUnit": "Slice-Months",
                "ResourceID": f"{line.project.namespace}/{line.product.device_class}",
                "ResourceName": f"{line.product.name} in {line.project.slug}",
                "ResourceType": "GPU slice entitlement",
                "SkuId": line.product.device_class,
                "SkuPriceId": f"{line.product.device_class}@{line.unit_monthly_price}",
                "SubAccountId": line.project.namespace,
                "SubAccountName": line.project.slug,
            }
        )
        yield row
    tax = _base(invoice, invoice.tax_total)
    tax.update({"ChargeCategory": "Tax", "ChargeDescription": f"Tax {invoice.tax_rate_percent} %"})
    yield tax


def credit_note_rows(note: CreditNote) -> Iterator[dict[str, str]]:
    invoice = note.invoice
    for cost, what in ((-note.net_amount, note.reason), (-note.tax_amount, "Tax on credit")):
        row = _base(invoice, cost)
        row.update(
            {
                "ChargeCategory": "Credit" if what == note.reason else "Tax",
                "ChargeClass": "Correction",
                "ChargeDescription": f"Credit note {note}: {what}"[:300],
                "Tags": json.dumps(
                    {"tranche/invoice": str(invoice), "tranche/credit-note": str(note)}
                ),
            }
        )
        yield row


def focus_rows(year: int, month: int, organization: Organization | None = None) -> Iterable[dict]:
    invoices = Invoice.objects.filter(year=year, month=month, state__in=BILLED).order_by("pk")
    notes = CreditNote.objects.filter(invoice__year=year, invoice__month=month).order_by("pk")
    if organization is not None:
        invoices = invoices.filter(organization=organization)
        notes = notes.filter(invoice__organization=organization)
    for invoice in invoices.prefetch_related("lines__project", "lines__product"):
        yield from invoice_rows(invoice)
    for note in notes.select_related("invoice"):
        yield from credit_note_rows(note)


def focus_csv(year: int, month: int, organization: Organization | None = None) -> str:
    """The month's FOCUS 1.0 CSV (every organization when `organization` is None)."""
    out = StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, restval="")
    writer.writeheader()
    for row in focus_rows(year, month, organization):
        writer.writerow({k: _safe(v) for k, v in row.items()})
    return out.getvalue()


def _safe(value: str) -> str:
    """Neutralise spreadsheet formulas in tenant-controlled text (CSV injection), not numbers."""
    text = str(value)
    if text[:1] in ("=", "+", "@", "\t", "\r") or (text[:1] == "-" and not _is_number(text)):
        return "'" + text
    return text


def _is_number(text: str) -> bool:
    try:
        Decimal(text)
    except ArithmeticError:
        return False
    return True
