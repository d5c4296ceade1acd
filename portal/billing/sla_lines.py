"""SLA credits as invoice lines: one negative line per affected slice (kind "sla"), and the
audit row of each when its invoice is written (docs/billing.md, "SLA credits").

A negative line rather than a credit note: the invoice code already bills credits as negative
lines (decreases), so the credit is part of the month's net that tax is computed on, the month
run issues it with the invoice in one transaction, and it needs no staff reason or issued
invoice first (a credit note corrects an issued invoice; this is the month's own bill).
"""

from __future__ import annotations

from portal.audit.services import record_audit
from portal.billing.models import Invoice, InvoiceLine
from portal.billing.sla import Credit, describe
from tranche import pricing

KIND = "sla"


def credit_row(sub, credit: Credit, year: int, month: int) -> InvoiceLine:
    """The unsaved invoice line of one slice's SLA credit (its outage in its words)."""
    begin, end = pricing.month_start(year, month), pricing.month_end(year, month)
    outage = credit.outage
    line = InvoiceLine(
        project_id=sub.project_id,
        product_id=sub.product_id,
        kind=KIND,
        description=describe(credit, sub.product_name, sub.project_label, sub.currency),
        delta=-1,
        quantity=1,
        unit_monthly_price=sub.unit_monthly_price,
        period_start=max(outage.started_at, begin),
        period_end=min(credit.until or end, end),
        hours=pricing.hours_in_month(year, month),
        amount=credit.amount,
    )
    line.sla_credit = credit  # read by audit_credits below, never stored
    return line


def audit_credits(invoice: Invoice, lines: list[InvoiceLine], actor) -> None:
    """One AuditLog row per SLA credit line, in the invoice's transaction."""
    for line in lines:
        credit = getattr(line, "sla_credit", None)
        if credit is None:
            continue
        record_audit(
            actor=actor,
            system="billing",
            action="invoice.sla_credit",
            obj=invoice,
            organization_id=invoice.organization_id,
            after={
                "outage": credit.outage.pk,
                "pod": credit.outage.pod_name,
                "downtime_seconds": credit.downtime_seconds,
                "availability_percent": str(credit.availability),
                "credit_percent": str(credit.credit_percent),
                "amount": str(credit.amount),
            },
        )


def focus_columns(amount) -> dict[str, str]:
    """What makes an SLA credit line a FOCUS Credit row (One-Time, not a correction of an
    earlier invoice: the month's own bill); it prices and consumes no quantity, so it has no
    unit price either, and every cost is the credit's amount."""
    cost = format(amount, "f")
    return {
        "ChargeCategory": "Credit",
        "ChargeFrequency": "One-Time",
        "ConsumedQuantity": "",
        "ConsumedUnit": "",
        "ContractedCost": cost,
        "ContractedUnitPrice": "",
        "ListCost": cost,
        "ListUnitPrice": "",
        "PricingQuantity": "",
        "PricingUnit": "",
        "x_ConsumedGpuHours": "",
    }
