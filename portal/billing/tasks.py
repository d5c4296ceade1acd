"""Celery beat job: invoice last month for every organization (idempotent; ids and dates only)."""

from __future__ import annotations

from celery import shared_task
from django.db import InterfaceError, OperationalError
from django.utils import timezone

from portal.billing import services
from tranche import pricing, tasknames


def previous_month(year: int, month: int) -> tuple[int, int]:
    return (year - 1, 12) if month == 1 else (year, month - 1)


@shared_task(
    name=tasknames.INVOICE_MONTH,
    acks_late=True,
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=1,
    retry_jitter=True,
    max_retries=10,
)
def invoice_month(year: int | None = None, month: int | None = None) -> dict[str, int]:
    """Invoice `year`-`month` (default: the month before now, UTC). Running it again, or twice at
    once, creates nothing more: one invoice per organization and month."""
    if year is None or month is None:
        year, month = previous_month(*pricing.month_of(timezone.now()))
    return services.run_monthly_invoices(int(year), int(month))
