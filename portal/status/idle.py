"""Idle slices: allocated, paid for, and under 1 % kernel-busy for longer than the idle window.

The node agent counts how long each slice has been idle (`PodSliceStatus.idle_seconds`, from
the core's launch accounting: nodeagent/slice_usage.py); past `settings.IDLE_SLICE_SECONDS`
(TRANCHE_IDLE_SLICE_SECONDS, default 6 h) the slice is a finding on the project's live page
and the support console, and `TrancheSliceIdle` alerts on the agent's metric. What a day of it
costs is the price the tenant's last order of that product was confirmed at, for 24 hours of
one slice in this month, rounded as an invoice line is (`tranche.priced.amount`). Reads only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.utils import timezone

from portal.agents.models import PodSliceStatus
from portal.orders.models import Order
from tranche import priced, pricing

MIB = 1024**2


@dataclass(frozen=True)
class IdleSlice:
    project_id: int
    namespace: str
    pod: str
    idle_seconds: float
    per_day: Decimal | None  # None: no order of a product of this slice's size found
    currency: str

    @property
    def text(self) -> str:
        """What happened, what it costs, what to do."""
        cost = f": you pay {self.per_day} {self.currency} per day for it" if self.per_day else ""
        idle = idle_words(self.idle_seconds)
        return (
            f"The GPU slice of pod {self.pod} has been idle for {idle}{cost}. "
            "Its kernels ran under 1 % of the time. Stop or scale down the workload, or cancel "
            "the slice on the quota page, to stop paying for it."
        )


def idle_words(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.0f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def _day_prices(project_ids: set[int], now: datetime) -> dict[tuple, tuple[Decimal, str]]:
    """(project, memory MiB, compute %) -> (a day of one slice, currency), from each product's
    latest order in the project (the price the tenant confirmed)."""
    hours = pricing.hours_in_month(*pricing.month_of(now))
    out = {}
    orders = (
        Order.objects.filter(project_id__in=project_ids)
        .order_by("created_at", "id")
        .values_list("project_id", "product__memory_mib", "product__compute_percent",
                     "unit_monthly_price", "product__currency")
    )  # fmt: skip
    for project, mib, pct, unit, currency in orders:  # the latest order wins
        out[(project, mib, pct)] = (priced.amount(unit, 1, 24, hours), currency)
    return out


def idle_slices(
    project_id: int | None = None, now: datetime | None = None, statuses: list | None = None
) -> list[IdleSlice]:
    """Idle slices of one project (None: every project, for support), longest idle first.
    `statuses`: the project's PodSliceStatus rows when the caller read them already (the live
    page): no query then unless one is idle (its price)."""
    now = now or timezone.now()
    window = settings.IDLE_SLICE_SECONDS
    if statuses is None:
        found = PodSliceStatus.objects.filter(idle_seconds__gte=window)
        if project_id is not None:
            found = found.filter(project_id=project_id)
        statuses = list(found)
    rows = sorted((r for r in statuses if r.idle_seconds >= window),
                  key=lambda r: (-r.idle_seconds, r.namespace, r.pod_name))  # fmt: skip
    prices = _day_prices({r.project_id for r in rows}, now) if rows else {}
    out = []
    for r in rows:
        key = (r.project_id, r.memory_limit_bytes // MIB, r.compute_target_percent)
        per_day, currency = prices.get(key, (None, ""))
        out.append(
            IdleSlice(r.project_id, r.namespace, r.pod_name, r.idle_seconds, per_day, currency)
        )
    return out
