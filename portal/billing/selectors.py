"""Every billing read, scoped to one organization (the caller's, already authorised), except the
`platform_*` reads which only billing staff reach (admin). Slice-seconds are derived from the
ledger here, never stored."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Q, QuerySet
from django.http import Http404
from django.utils import timezone

from portal.billing.charges import current_quantity, subscription_months
from portal.billing.models import CreditNote, Invoice, UsageRecord
from portal.tenants.models import Organization
from tranche import money, pricing


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
    """One product of one project on the tenant's billing page."""

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


def month_to_date(organization: Organization, now: datetime | None = None) -> list[ProductMonth]:
    """Entitled vs used slice-hours, cost so far and projected total, per project and product."""
    now = now or timezone.now()
    year, month = pricing.month_of(now)
    begin = pricing.month_start(year, month)
    started_hours = pricing.hour_index(now, year, month) + 1
    used: dict[tuple[int, int], int] = defaultdict(int)
    for record in usage_in(begin, now, organization):
        used[(record.project_id, record.product_id)] += overlap_seconds(record, begin, now, now)
    lines = []
    for sub in subscription_months([organization.pk], year, month).get(organization.pk, []):
        segments = pricing.hourly_segments(sub.start_quantity, list(sub.changes), year, month)
        entitled = sum(s.quantity * max(0, min(s.end, started_hours) - s.start) for s in segments)
        seconds = used.get((sub.project_id, sub.product_id), 0)
        ratio = (Decimal(seconds) / 36 / entitled).quantize(Decimal("0.1")) if entitled else None
        held = current_quantity(sub)
        lines.append(
            ProductMonth(
                project_label=sub.project_label,
                product_name=sub.product_name,
                device_class=sub.device_class,
                held_now=held,
                entitled_slice_hours=Decimal(entitled),
                used_slice_hours=(Decimal(seconds) / 3600).quantize(Decimal("0.01")),
                utilisation_percent=ratio,
                cost_so_far=pricing.cost_to(
                    sub.unit_monthly_price, sub.start_quantity, list(sub.changes), now
                ),
                projected=money.total(
                    line.amount
                    for line in pricing.invoice_lines(
                        sub.unit_monthly_price, sub.start_quantity, list(sub.changes), year, month
                    )
                ),
                cost_per_hour_now=pricing.hourly_rate(sub.unit_monthly_price, held, now),
                currency=sub.currency,
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
