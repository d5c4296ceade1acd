"""Every billing read, scoped to one organization (the caller's, already authorised), except the
`platform_*` reads which only billing staff reach (admin). Slice-seconds are derived from the
ledger here, never stored."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Q, QuerySet
from django.http import Http404
from django.utils import timezone

from portal.billing import charges
from portal.billing.charges import current_quantity, subscription_months
from portal.billing.models import BillingAccount, CreditNote, Invoice
from portal.catalog.taxes import TaxTerms
from portal.cluster.models import UsageRecord
from portal.tenants.models import Organization
from tranche import money, priced, pricing


def account_terms(organization: Organization) -> tuple[Decimal, str]:
    """(tax rate percent, currency) the organization is billed at; the account's defaults when
    it has no account row yet (the first invoice creates it with those same defaults)."""
    account = BillingAccount.objects.filter(organization=organization).first()
    if account is None:
        account = BillingAccount(organization=organization)
    return Decimal(account.tax_rate_percent), account.currency


def tax_terms(organization: Organization, at: datetime) -> TaxTerms:
    """What an order's quote needs to show its tax (registered as the orders' tax source): the
    net the month's invoice would bill as it stands at `at`, overage so far included (the
    invoice's own lines, `charges.month_net`), so the tax the quote adds is what the invoice's
    tax grows by."""
    rate, currency = account_terms(organization)
    return TaxTerms(
        rate_percent=rate,
        currency=currency,
        month_net=charges.month_net(organization.pk, *pricing.month_of(at), until=at),
    )


class _TaxSource:
    """The catalogue's and the quotes' view of billing accounts (see `portal.catalog.taxes`)."""

    def rate(self, organization: Organization | None) -> Decimal:
        if organization is None:
            return Decimal(BillingAccount._meta.get_field("tax_rate_percent").default)
        return account_terms(organization)[0]

    def terms(self, organization: Organization, at: datetime) -> TaxTerms:
        return tax_terms(organization, at)


TAX_SOURCE = _TaxSource()


def usage_in(
    start: datetime, end: datetime, organization: Organization | None = None
) -> QuerySet[UsageRecord]:
    """Records that overlap [start, end)."""
    qs = UsageRecord.objects.filter(allocated_at__lt=end).filter(
        Q(released_at__isnull=True) | Q(released_at__gt=start)
    )
    if organization is not None:
        qs = qs.filter(organization=organization)
    return qs


def overlap_seconds(record: UsageRecord, start: datetime, end: datetime, now: datetime) -> int:
    """Seconds of `record` inside [start, min(end, now)) (an open record runs until now)."""
    stop = min(record.released_at or now, end, now)
    begin = max(record.allocated_at, start)
    return max(0, int((stop - begin).total_seconds()))


def slice_seconds(
    organization: Organization | None, start: datetime, end: datetime, now: datetime | None = None
) -> dict[str, int]:
    """Slice-seconds held per device class in [start, end)."""
    now = now or timezone.now()
    totals: dict[str, int] = defaultdict(int)
    for record in usage_in(start, end, organization).select_related("product"):
        totals[record.product.device_class] += overlap_seconds(record, start, end, now)
    return dict(totals)


@dataclass(frozen=True)
class ProductMonth:
    """One product of one project on the tenant's billing page (amounts net of tax)."""

    project_label: str
    product_name: str
    device_class: str
    held_now: int
    entitled_slice_hours: Decimal
    used_slice_hours: Decimal
    utilisation_percent: Decimal | None
    cost_so_far: Decimal
    projected: Decimal
    cost_per_hour_now: Decimal
    currency: str
    estimated: bool = False  # some used time is when Tranche noticed, not the cluster's record


def month_to_date(organization: Organization, now: datetime | None = None) -> list[ProductMonth]:
    """Entitled vs used slice-hours, cost so far and projected total, per project and product.

    Cost so far is the projected invoice less the rounded rest of each line after the hours
    started so far, so once nothing changes any more (a cancelled slice) it is the invoice's
    amount to the cent."""
    now = now or timezone.now()
    year, month = pricing.month_of(now)
    begin = pricing.month_start(year, month)
    total_hours = pricing.hours_in_month(year, month)
    started_hours = pricing.hour_index(now, year, month) + 1
    used: dict[tuple[int, int], int] = defaultdict(int)
    estimated: set[tuple[int, int]] = set()
    for record in usage_in(begin, now, organization):
        used[(record.project_id, record.product_id)] += overlap_seconds(record, begin, now, now)
        if record.times_estimated:
            estimated.add((record.project_id, record.product_id))
    lines = []
    subs = subscription_months([organization.pk], year, month).get(organization.pk, [])
    for bill in charges.month_bills(subs, year, month, now):
        sub = bill.sub
        segments = pricing.hourly_segments(sub.start_quantity, list(sub.changes), year, month)
        entitled = sum(s.quantity * max(0, min(s.end, started_hours) - s.start) for s in segments)
        seconds = used.get((sub.project_id, sub.product_id), 0)
        ratio = (Decimal(seconds) / 36 / entitled).quantize(Decimal("0.1")) if entitled else None
        held = current_quantity(sub)
        projected = bill.net
        rest = money.total(
            priced.amount(
                line.unit_monthly,
                line.delta,
                min(line.hours, total_hours - started_hours),
                total_hours,
            )
            for line in bill.lines
        )
        held_units = priced.held_at(sub.orders, now + timedelta(seconds=1))
        per_hour = money.round_cents(sum(held_units, Decimal(0)) / total_hours)
        lines.append(
            ProductMonth(
                project_label=sub.project_label,
                product_name=sub.product_name,
                device_class=sub.device_class,
                held_now=held,
                entitled_slice_hours=Decimal(entitled),
                used_slice_hours=(Decimal(seconds) / 3600).quantize(Decimal("0.01")),
                utilisation_percent=ratio,
                cost_so_far=projected - rest,
                projected=projected,
                cost_per_hour_now=per_hour,
                currency=sub.currency,
                estimated=(sub.project_id, sub.product_id) in estimated,
            )
        )
    return lines


def invoices_of(organization: Organization) -> QuerySet[Invoice]:
    """The organization's invoices a tenant may see (drafts are not documents yet)."""
    return Invoice.objects.filter(organization=organization).exclude(state=Invoice.State.DRAFT)


def credit_notes_of(organization: Organization) -> QuerySet[CreditNote]:
    return CreditNote.objects.filter(invoice__organization=organization).select_related("invoice")


def get_invoice(organization: Organization, invoice_id: int) -> Invoice:
    invoice = invoices_of(organization).filter(pk=invoice_id).first()
    if invoice is None:
        raise Http404("No such invoice.")
    return invoice


def get_credit_note(organization: Organization, note_id: int) -> CreditNote:
    note = credit_notes_of(organization).filter(pk=note_id).first()
    if note is None:
        raise Http404("No such credit note.")
    return note
