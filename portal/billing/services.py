"""Every billing write: invoices, their state changes, credit notes and billing accounts.

Each function runs in one transaction with its AuditLog row (`record_audit`), so a money change
and its audit commit or roll back together. State changes are compare-and-swap updates
(`UPDATE … WHERE state=old`): two staff clicking at once change it once.

- `generate_invoice` is idempotent: one invoice per organization and month (a unique constraint
  arbitrates concurrent runs; the loser returns the winner's invoice).
- Numbers are taken from `DocumentCounter` with the counter row locked inside the transaction
  that issues the document, so a rolled-back issue gives its number back: no gaps, no duplicates.
- An issued invoice is never edited: it is paid, voided (its number stays used) or credited.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.utils import timezone

from portal.audit.services import record_audit
from portal.billing import charges, sla_lines
from portal.billing.accounts import billing_account, seller_details
from portal.billing.charges import SubscriptionMonth, subscription_months
from portal.billing.models import CreditNote, DocumentCounter, Invoice, InvoiceLine
from portal.tenants.errors import ConflictError, ServiceError
from portal.tenants.models import Organization
from tranche import money, pricing

SYSTEM = "billing"
SELLER_REQUIRED = {"address": "TRANCHE_SELLER_ADDRESS", "vat_id": "TRANCHE_SELLER_VAT_ID"}


def take_number(series: str, year: int) -> int:
    """The next number of `series` in `year`; call inside the issuing transaction."""
    DocumentCounter.objects.bulk_create(
        [DocumentCounter(series=series, year=year)], ignore_conflicts=True
    )
    counter = DocumentCounter.objects.select_for_update().get(series=series, year=year)
    counter.last_number += 1
    DocumentCounter.objects.filter(pk=counter.pk).update(last_number=counter.last_number)
    return counter.last_number


def _line_rows(subs: list[SubscriptionMonth], year: int, month: int) -> list[InvoiceLine]:
    """Each subscription's priced lines (every slice at the price its order confirmed), plus
    one line for slices held past a decrease's grace period (docs/billing.md): the month's
    bills as they stand at its end (`charges.month_bills`, which quotes and pages read too)."""
    what = {"month": "month", "increase": "increase", "decrease": "decrease (credit)"}
    lines = []
    for bill in charges.month_bills(subs, year, month, pricing.month_end(year, month)):
        sub = bill.sub
        if bill.overage_hours:
            lines.append(_overage_row(bill, year, month))
        lines += [sla_lines.credit_row(bill.sub, credit, year, month) for credit in bill.credits]
        for line in bill.lines:
            order = f"order #{line.order}, " if line.order else ""
            lines.append(
                InvoiceLine(
                    project_id=sub.project_id,
                    product_id=sub.product_id,
                    kind=line.kind,
                    description=(
                        f"{sub.product_name} x {abs(line.delta)} in {sub.project_label}: "
                        f"{what[line.kind]} ({order}{line.unit_monthly} {sub.currency}/month) "
                        f"from {line.period_start:%Y-%m-%d %H:%M} UTC to month end "
                        f"({line.hours} h)"
                    )[:300],
                    delta=line.delta,
                    quantity=max(0, line.quantity),
                    unit_monthly_price=line.unit_monthly,
                    period_start=line.period_start,
                    period_end=line.period_end,
                    hours=line.hours,
                    amount=line.amount,
                )
            )
    return lines


class MonthNotEndedError(ServiceError):
    """An invoice asked for a month that is still running or has not begun."""


def check_month_ended(year: int, month: int, now=None) -> None:
    """Refuse a month that has not ended: its orders can still change what it bills."""
    now = now or timezone.now()
    if not 1 <= month <= 12:
        raise ServiceError(f"There is no month {month}; months are 1 to 12.")
    if pricing.month_end(year, month) > now:
        raise MonthNotEndedError(
            f"{year}-{month:02d} has not ended yet (it ends "
            f"{pricing.month_end(year, month):%Y-%m-%d %H:%M} UTC), so it cannot be invoiced: "
            "orders may still change what it bills. Invoice it after the month's end."
        )


def _overage_row(bill: charges.SubscriptionBill, year: int, month: int) -> InvoiceLine:
    sub, slice_hours = bill.sub, bill.overage_hours
    return InvoiceLine(
        project_id=sub.project_id,
        product_id=sub.product_id,
        kind="overage",
        description=(
            f"{sub.product_name} in {sub.project_label}: {slice_hours} slice-hours held beyond "
            f"the plan after the grace period of a cancel or decrease, per started hour at "
            f"{sub.unit_monthly_price} {sub.currency}/month"
        )[:300],
        delta=1,
        quantity=0,
        unit_monthly_price=sub.unit_monthly_price,
        period_start=pricing.month_start(year, month),
        period_end=pricing.month_end(year, month),
        hours=slice_hours,
        amount=bill.overage,
    )


def generate_invoice(
    organization: Organization,
    year: int,
    month: int,
    *,
    subs: list[SubscriptionMonth] | None = None,
    issue: bool = True,
    actor=None,
) -> tuple[Invoice | None, bool]:
    """The organization's invoice for an ended month: (invoice, created). None when nothing was
    held. `MonthNotEndedError` for a running or future month.

    Idempotent: an existing live (not void) invoice of that month is returned untouched. After a
    void, a new invoice is made that references the voided one (`corrects`). `subs` lets a batch
    pass what it already read; `issue` numbers it at once (the monthly run does)."""
    check_month_ended(year, month)
    months = Invoice.objects.filter(organization=organization, year=year, month=month)
    existing = months.exclude(state=Invoice.State.VOID).first()
    if existing is not None:
        return existing, False
    if subs is None:
        subs = subscription_months([organization.pk], year, month).get(organization.pk, [])
    lines = _line_rows(subs, year, month)
    if not lines:  # e.g. only claims held inside a cancel's grace period: nothing to bill
        return None, False
    voided = months.filter(state=Invoice.State.VOID, corrected_by__isnull=True).last()
    try:
        with transaction.atomic():
            invoice = _create_invoice(
                organization, year, month, lines=lines, issue=issue, voided=voided, actor=actor
            )
            return invoice, True
    except IntegrityError:  # a concurrent run created it first
        return months.exclude(state=Invoice.State.VOID).get(), False


def preview_lines(organization: Organization, year: int, month: int) -> list[InvoiceLine]:
    """The lines an invoice of the month would have now (unsaved), for staff's preview."""
    subs = subscription_months([organization.pk], year, month).get(organization.pk, [])
    return _line_rows(subs, year, month)


def _create_invoice(
    organization: Organization,
    year: int,
    month: int,
    *,
    lines: list[InvoiceLine],
    issue: bool,
    voided: Invoice | None = None,
    actor=None,
) -> Invoice:
    seller = seller_details()
    missing = [k for k, setting in SELLER_REQUIRED.items() if not seller.get(k)]
    if missing:
        raise ServiceError(
            "No invoice was issued: the seller's "
            + " and ".join(f"{k.replace('_', ' ')} ({SELLER_REQUIRED[k]})" for k in missing)
            + " must be printed on it and are not configured. Set them and run it again."
        )
    account = billing_account(organization)
    net = money.total(line.amount for line in lines)
    tax = money.tax_of(net, account.tax_rate_percent)
    invoice = Invoice.objects.create(
        organization=organization,
        year=year,
        month=month,
        currency=account.currency,
        tax_rate_percent=account.tax_rate_percent,
        seller=seller,
        buyer={
            "name": account.legal_name or organization.name,
            "address": account.address,
            "vat_id": account.vat_id,
            "email": account.email,
            "organization": organization.slug,
        },
        net_total=net,
        tax_total=tax,
        total=net + tax,
        corrects=voided,
    )
    for line in lines:
        line.invoice = invoice
    InvoiceLine.objects.bulk_create(lines)
    sla_lines.audit_credits(invoice, lines, actor)
    record_audit(
        actor=actor,
        system=SYSTEM,
        action="invoice.draft",
        obj=invoice,
        organization_id=organization.pk,
        after={
            "month": f"{year}-{month:02d}",
            "lines": len(lines),
            "total": str(invoice.total),
            "corrects": str(voided or ""),
        },
    )
    if issue:
        _issue(invoice, actor=actor)
    return invoice


def _issue(invoice: Invoice, actor) -> None:
    year = timezone.now().year
    number = take_number(invoice.series, year)
    _transition(
        invoice,
        actor,
        (Invoice.State.DRAFT,),
        Invoice.State.ISSUED,
        action="invoice.issue",
        conflict="This invoice is no longer a draft; reload the page to see its state.",
        audit_after=lambda issued: {
            "number": issued.display_number,
            "total": str(issued.total),
        },
        number=number,
        number_year=year,
        issued_at=timezone.now(),
    )


@transaction.atomic
def issue_invoice(invoice: Invoice, actor) -> Invoice:
    """Number a draft and make it final."""
    _issue(invoice, actor)
    return invoice


def _transition(
    invoice: Invoice,
    actor,
    old: tuple[str, ...],
    new: str,
    *,
    action: str = "",
    conflict: str = "",
    audit_after: Callable[[Invoice], dict] | None = None,
    **fields,
) -> Invoice:
    """Move `invoice` from one of the `old` states to `new` (setting `fields`) if the database
    still has it there, and audit it as `action` (default `invoice.<new>`); ConflictError
    (`conflict`, or a general message) if not. The audit's `after` holds the new state and
    `audit_after(invoice)`, else the fields."""
    swapped = Invoice.objects.filter(pk=invoice.pk, state__in=old).update(state=new, **fields)
    if not swapped:
        raise ConflictError(
            conflict
            or f"Invoice {invoice} is {invoice.state}, so it cannot become {new}. "
            "Reload the page to see its current state."
        )
    before = invoice.state
    invoice.state = new
    for key, value in fields.items():
        setattr(invoice, key, value)
    after = audit_after(invoice) if audit_after else {k: str(v) for k, v in fields.items()}
    record_audit(
        actor=actor,
        system=SYSTEM,
        action=action or f"invoice.{new}",
        obj=invoice,
        organization_id=invoice.organization_id,
        before={"state": before},
        after={"state": new, **after},
    )
    return invoice


@transaction.atomic
def mark_paid(invoice: Invoice, actor) -> Invoice:
    return _transition(
        invoice, actor, (Invoice.State.ISSUED,), Invoice.State.PAID, paid_at=timezone.now()
    )


@transaction.atomic
def void_invoice(invoice: Invoice, actor, reason: str) -> Invoice:
    """Void an issued invoice (its number stays used); a draft is voided without a number."""
    reason = (reason or "").strip()
    if not reason:
        raise ServiceError("Say why the invoice is voided (the reason is printed and audited).")
    if invoice.credit_notes.exists():
        raise ServiceError(
            f"Invoice {invoice} has credit notes, so it cannot be voided; credit the rest instead."
        )
    return _transition(
        invoice,
        actor,
        (Invoice.State.DRAFT, Invoice.State.ISSUED),
        Invoice.State.VOID,
        voided_at=timezone.now(),
        void_reason=reason[:200],
    )


def credit_amount(value) -> Decimal:
    """A credit amount as staff typed it: a finite number of cents, else a clear ServiceError
    (nothing is rounded silently: 0.005 is refused, not turned into 0.01)."""
    try:
        amount = value if isinstance(value, Decimal) else Decimal(str(value).strip())
    except (ArithmeticError, ValueError):
        amount = None
    if amount is None or not amount.is_finite():
        raise ServiceError(
            f"The credit amount {value!s:.20} is not a number; write it like 12.50 (before tax)."
        )
    if amount != money.round_cents(amount):
        raise ServiceError(
            f"The credit amount {amount} has more than 2 decimals; credits are whole cents. "
            "Write it like 12.50 (before tax)."
        )
    return money.round_cents(amount)


@transaction.atomic
def issue_credit_note(invoice: Invoice, actor, net_amount: Decimal, reason: str) -> CreditNote:
    """Credit `net_amount` (before tax) of an issued or paid invoice, with a reason."""
    reason = (reason or "").strip()
    if not reason:
        raise ServiceError(
            "Say why the credit is given (the reason is printed on the credit note)."
        )
    locked = Invoice.objects.select_for_update().get(pk=invoice.pk)
    if locked.state not in (Invoice.State.ISSUED, Invoice.State.PAID):
        raise ServiceError(
            f"Invoice {locked} is {locked.state}; credit notes go against issued or paid invoices."
        )
    net = credit_amount(net_amount)
    credited = money.total(locked.credit_notes.values_list("net_amount", flat=True))
    if net <= 0 or net + credited > locked.net_total:
        raise ServiceError(
            f"A credit must be more than 0 and at most what is left to credit on {locked} "
            f"({locked.net_total - credited} {locked.currency} before tax); you asked {net}."
        )
    # the tax of everything credited so far, less what earlier notes credited: crediting the
    # whole net in any number of notes credits the whole tax (rounded once, like the invoice)
    rate = locked.tax_rate_percent
    tax = money.tax_added(credited, net, rate)
    now = timezone.now()
    note = CreditNote.objects.create(
        invoice=locked,
        number_year=now.year,
        number=take_number("CN", now.year),
        reason=reason[:300],
        net_amount=net,
        tax_amount=tax,
        total=net + tax,
        currency=locked.currency,
        issued_at=now,
        issued_by=actor if getattr(actor, "is_authenticated", False) else None,
    )
    record_audit(
        actor=actor,
        system=SYSTEM,
        action="credit_note.issue",
        obj=note,
        organization_id=locked.organization_id,
        after={"invoice": str(locked), "net": str(net), "tax": str(tax), "reason": note.reason},
    )
    return note


def run_monthly_invoices(year: int, month: int) -> dict[str, int]:
    """Invoice every organization that held anything in the month; safe to run any number of
    times and concurrently (one invoice per organization and month). Only an ended month:
    `MonthNotEndedError` otherwise."""
    check_month_ended(year, month)
    per_org = subscription_months(None, year, month)
    created = 0
    for organization in Organization.objects.filter(pk__in=list(per_org)).order_by("pk"):
        _, made = generate_invoice(organization, year, month, subs=per_org[organization.pk])
        created += made
    return {"organizations": len(per_org), "created": created}
