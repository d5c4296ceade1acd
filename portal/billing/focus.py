"""FOCUS (FinOps Open Cost and Usage Specification) 1.2 CSV of invoices, credit notes and usage.

Column IDs and rules are the 1.2 specification's (FOCUS_Spec tag v1.2, specification/columns/):
every Mandatory column, every Conditional one the export's applicability criteria
(`APPLICABILITY`) require, the Recommended ones, then custom `x_` columns after them
(specification/attributes/column_handling.md). Rows, per month:
- one Usage row per invoice line (a full month or pro-ration; a decrease is a negative row, a
  refund of slice-hours), Recurring: a slice is a provisioned resource billed per hour it is held
  in the plan (FOCUS keeps Purchase for what is bought to cover later charges, whose effective
  cost is 0). PricingQuantity = ConsumedQuantity = the exact slice-hours (delta x hours),
  x_ConsumedGpuHours them normalised as below; ListUnitPrice the monthly price spread over the
  month, at 10 decimals;
- an overage line (slices held past a decrease's grace period) as a Usage row, Usage-Based;
- one Usage row per project and product from the metering ledger, Usage-Based, cost 0 (what was
  held, included in the plan's rows): ConsumedQuantity is slice-hours held, and
  x_ConsumedGpuHours the same normalised by the slice's fraction of its GPU (four 25 % slices for
  one hour = 1.000000);
- one Tax row per invoice (One-Time);
- an SLA credit line (billing.sla_lines) as a Credit row, One-Time, not a correction (it is the
  month's own bill), with no pricing quantity or unit price;
- per credit note, a Credit row and its Tax row, both corrections (ChargeClass Correction),
  One-Time;
- a void invoice's rows as issued, each followed by its reversal (Correction, One-Time), so the
  month sums to what its corrected invoice (InvoiceId, x_Corrects) bills. Drafts are left out.
No discounts: ListCost = ContractedCost = ListUnitPrice x PricingQuantity exactly; BilledCost =
EffectiveCost = the invoice line's amount, to the cent (the two differ by its rounding).
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from decimal import Decimal
from io import StringIO

from django.utils import timezone

from portal.billing.models import CreditNote, Invoice
from portal.billing.selectors import overlap_seconds, usage_in
from portal.billing.sla_lines import KIND as SLA_CREDIT
from portal.billing.sla_lines import focus_columns as sla_credit_columns
from portal.tenants.models import Organization
from tranche import pricing

COLUMNS = [
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency",
    "BillingPeriodEnd", "BillingPeriodStart", "ChargeCategory", "ChargeClass",
    "ChargeDescription", "ChargeFrequency", "ChargePeriodEnd", "ChargePeriodStart",
    "ConsumedQuantity", "ConsumedUnit", "ContractedCost", "ContractedUnitPrice", "EffectiveCost",
    "InvoiceId", "InvoiceIssuerName", "ListCost", "ListUnitPrice", "PricingCategory",
    "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName", "ResourceId",
    "ResourceName", "ResourceType", "ServiceCategory", "ServiceName", "ServiceSubcategory",
    "SkuId", "SkuMeter", "SkuPriceDetails", "SkuPriceId", "SubAccountId", "SubAccountName",
    "Tags",
    # custom columns, after the specification's
    "x_ConsumedGpuHours", "x_CreditNoteId", "x_InvoiceState", "x_Corrects",
]  # fmt: skip
# The FOCUS 1.2 applicability criteria this export meets (the conditions under which the
# specification requires its Conditional columns): a public catalogue of unit prices, usage
# measured (the ledger), projects as sub-accounts, billing by provisioned slices typed as
# resources, prices fixed when an order is confirmed (contracted), tags, named accounts.
APPLICABILITY = (
    "ACCOUNT_NAMING_SUPPORTED",
    "BILLING_BASED_ON_PROVISIONED_RESOURCES_SUPPORTED",
    "NEGOTIATED_PRICING_SUPPORTED",
    "PUBLIC_PRICE_LIST_SUPPORTED",
    "RESOURCE_TYPE_ASSIGNMENT_SUPPORTED",
    "SUB_ACCOUNT_SUPPORTED",
    "TAGGING_SUPPORTED",
    "UNIT_PRICING_SUPPORTED",
    "USAGE_MEASUREMENT_SUPPORTED",
)
EXPORTED = (Invoice.State.ISSUED, Invoice.State.PAID, Invoice.State.VOID)
QUANTITY = Decimal("0.000001")
UNIT_PRICE = Decimal("0.0000000001")  # the declared precision of unit prices (10 decimals)
SLICE_HOURS = "Slice-Hours"
SKU_METER = "GPU slice time"


def _ts(value) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def _num(value: Decimal) -> str:
    """A FOCUS numeric value: plain decimal notation, never an exponent ("0E-10")."""
    return format(value, "f")


def _gpu_hours(slice_seconds: Decimal, product) -> str:
    """Slice-seconds as GPU-hours: normalised by the slice's fraction of its GPU (four 25 %
    slices for one hour = 1.000000)."""
    return _num((slice_seconds * product.fraction_percent / 100 / 3600).quantize(QUANTITY))


def _base(invoice: Invoice, cost: Decimal) -> dict[str, str]:
    seller = invoice.seller.get("name") or "Tranche"
    start = _ts(pricing.month_start(invoice.year, invoice.month))
    end = _ts(pricing.month_end(invoice.year, invoice.month))
    return {
        "BilledCost": _num(cost),
        "BillingAccountId": invoice.buyer.get("organization", ""),
        "BillingAccountName": invoice.buyer.get("name", ""),
        "BillingCurrency": invoice.currency,
        "BillingPeriodStart": start,
        "BillingPeriodEnd": end,
        "ChargePeriodStart": start,
        "ChargePeriodEnd": end,
        "ContractedCost": _num(cost),
        "EffectiveCost": _num(cost),
        "ListCost": _num(cost),
        "InvoiceId": invoice.display_number,
        "InvoiceIssuerName": seller,
        "ProviderName": seller,
        "PublisherName": seller,
        "ServiceCategory": "Compute",
        "ServiceName": "GPU slices",
        "ServiceSubcategory": "Containers",  # slices serve the tenants' Kubernetes pods
        "Tags": json.dumps({"tranche/invoice": str(invoice)}),
        "x_InvoiceState": invoice.state,
        "x_Corrects": invoice.corrects.display_number if invoice.corrects_id else "",
    }


def _priced(row: dict[str, str], unit: Decimal, quantity: Decimal) -> None:
    """List and contracted cost are unit price x quantity exactly (the unit price at its 10
    decimals); billed and effective cost stay the invoice's amount, to the cent: the two differ
    by the invoice's rounding, under half a cent a line."""
    cost = _num(unit * quantity)
    row.update(
        {
            "ContractedUnitPrice": _num(unit),
            "ListUnitPrice": _num(unit),
            "PricingQuantity": _num(quantity),
            "PricingUnit": SLICE_HOURS,
            "ContractedCost": cost,
            "ListCost": cost,
        }
    )


def _sku_price_details(product) -> str:
    """What one slice-hour of the SKU is (provider-defined properties, `x_`-prefixed), per
    pricing unit: one slice."""
    return json.dumps(
        {
            "x_GpuModel": product.gpu_model.name,
            "x_GpuFractionPercent": product.fraction_percent,
            "x_ComputePercent": product.compute_percent,
            "x_MemoryMiB": product.memory_mib,
        }
    )


def _resource(row: dict[str, str], project, product, sku_price: str) -> None:
    row.update(
        {
            "PricingCategory": "Standard",
            "ResourceId": f"{project.namespace}/{product.device_class}",
            "ResourceName": f"{product.name} in {project.slug}",
            "ResourceType": "GPU slice entitlement",
            "SkuId": product.device_class,
            "SkuMeter": SKU_METER,
            "SkuPriceDetails": _sku_price_details(product),
            "SkuPriceId": f"{product.device_class}@{sku_price}",
            "SubAccountId": project.namespace,
            "SubAccountName": project.slug,
        }
    )


def invoice_rows(invoice: Invoice) -> Iterator[dict[str, str]]:
    """The invoice's lines (Usage rows: a slice is a provisioned resource billed per hour held in
    the plan) and its Tax row, as issued."""
    hours = pricing.hours_in_month(invoice.year, invoice.month)
    for line in invoice.lines.all():
        row = _base(invoice, line.amount)
        unit = (line.unit_monthly_price / hours).quantize(UNIT_PRICE)
        overage = line.kind == "overage"  # held past a cancel's grace: billed per use
        slice_hours = Decimal(line.delta * line.hours)
        row.update(
            {
                "ChargeCategory": "Usage",
                "ChargeDescription": line.description,
                "ChargeFrequency": "Usage-Based" if overage else "Recurring",
                "ConsumedQuantity": _num(slice_hours.quantize(QUANTITY)),
                "ConsumedUnit": SLICE_HOURS,
                "ChargePeriodStart": _ts(line.period_start),
                "ChargePeriodEnd": _ts(line.period_end),
                "x_ConsumedGpuHours": _gpu_hours(slice_hours * 3600, line.product),
            }
        )
        _priced(row, unit, slice_hours)
        if line.kind == SLA_CREDIT:
            row.update(sla_credit_columns(line.amount))
        _resource(row, line.project, line.product, f"{line.unit_monthly_price}/month")
        yield row
    tax = _base(invoice, invoice.tax_total)
    tax.update(
        {
            "ChargeCategory": "Tax",
            "ChargeDescription": f"Tax {invoice.tax_rate_percent} % on {invoice.net_total}",
            "ChargeFrequency": "One-Time",
        }
    )
    yield tax


def usage_rows(invoice: Invoice) -> Iterator[dict[str, str]]:
    """What the invoice's organization held in the month, from the ledger (cost 0)."""
    begin = pricing.month_start(invoice.year, invoice.month)
    end = pricing.month_end(invoice.year, invoice.month)
    now = timezone.now()
    seconds: dict[tuple, int] = defaultdict(int)
    what: dict[tuple, tuple] = {}
    records = usage_in(begin, end).filter(organization_id=invoice.organization_id)
    for record in records.select_related("project", "product__gpu_model"):
        key = (record.project_id, record.product_id)
        seconds[key] += overlap_seconds(record, begin, end, now)
        what[key] = (record.project, record.product)
    for key in sorted(seconds):
        project, product = what[key]
        held = Decimal(seconds[key])
        slice_hours = (held / 3600).quantize(QUANTITY)
        row = _base(invoice, Decimal("0.00"))
        row.update(
            {
                "ChargeCategory": "Usage",
                "ChargeDescription": (
                    f"{product.name} held in {project.slug} (included in the entitlement)"
                ),
                "ChargeFrequency": "Usage-Based",
                "ConsumedQuantity": _num(slice_hours),
                "ConsumedUnit": SLICE_HOURS,
                "x_ConsumedGpuHours": _gpu_hours(held, product),
            }
        )
        _priced(row, Decimal(0), slice_hours)
        _resource(row, project, product, "included")
        yield row


def void_rows(invoice: Invoice) -> Iterator[dict[str, str]]:
    """A void invoice's rows as issued, each followed by its reversal."""
    for row in invoice_rows(invoice):
        yield row
        reverse = dict(row)
        for column in ("BilledCost", "ContractedCost", "EffectiveCost", "ListCost"):
            reverse[column] = _num(-Decimal(row[column]))
        for column in ("PricingQuantity", "ConsumedQuantity", "x_ConsumedGpuHours"):
            if row.get(column):
                reverse[column] = _num(-Decimal(row[column]))
        reverse.update(
            {
                "ChargeClass": "Correction",
                "ChargeFrequency": "One-Time",
                "ChargeDescription": f"Void of {invoice}: {invoice.void_reason}"[:300],
            }
        )
        yield reverse


def credit_note_rows(note: CreditNote) -> Iterator[dict[str, str]]:
    invoice = note.invoice
    for cost, category, what in (
        (-note.net_amount, "Credit", note.reason),
        (-note.tax_amount, "Tax", "Tax on credit"),
    ):
        row = _base(invoice, cost)
        row.update(
            {
                "ChargeCategory": category,
                "ChargeClass": "Correction",
                "ChargeFrequency": "One-Time",
                "ChargeDescription": f"Credit note {note}: {what}"[:300],
                "Tags": json.dumps(
                    {"tranche/invoice": str(invoice), "tranche/credit-note": str(note)}
                ),
                "x_CreditNoteId": note.display_number,
            }
        )
        yield row


def focus_rows(year: int, month: int, organization: Organization | None = None) -> Iterable[dict]:
    invoices = Invoice.objects.filter(year=year, month=month, state__in=EXPORTED).order_by("pk")
    notes = CreditNote.objects.filter(invoice__year=year, invoice__month=month).order_by("pk")
    if organization is not None:
        invoices = invoices.filter(organization=organization)
        notes = notes.filter(invoice__organization=organization)
    for invoice in invoices.select_related("corrects").prefetch_related(
        "lines__project", "lines__product__gpu_model"
    ):
        if invoice.state == Invoice.State.VOID:
            yield from void_rows(invoice)
        else:
            yield from invoice_rows(invoice)
            yield from usage_rows(invoice)
    for note in notes.select_related("invoice", "invoice__corrects"):
        yield from credit_note_rows(note)


def focus_csv(year: int, month: int, organization: Organization | None = None) -> str:
    """The month's FOCUS 1.2 CSV (every organization when `organization` is None)."""
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
