"""Pure pricing rules (no Django): monthly entitlements billed per calendar month, to the hour.

See docs/billing.md. In short:
- a subscription of N slices of a product costs N x the product's monthly price per calendar
  month (UTC), spread evenly over the month's hours (672, 696, 720 or 744: UTC has no DST);
- each hour is billed at the highest quantity held during it, so a buy and a cancel in the same
  hour cost that hour once, and a re-buy in that hour costs nothing more;
- on an invoice, the quantity held when the month starts is one full-month line, and every change
  of the hourly quantity is one signed pro-ration line from its hour to the end of the month: an
  increase is a charge, a decrease or a cancel is a credit (a negative line);
- every line is rounded once, half-up, to the cent (`tranche.money`).
"""

from __future__ import annotations

import calendar
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from tranche.money import round_cents, to_decimal

HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Change:
    """The subscription's quantity became `quantity` at `at` (an aware datetime)."""

    at: datetime
    quantity: int


@dataclass(frozen=True)
class Segment:
    """Hours [start, end) of the month (hour indexes from 0) billed at `quantity`."""

    start: int
    end: int
    quantity: int

    @property
    def hours(self) -> int:
        return self.end - self.start


def month_start(year: int, month: int) -> datetime:
    return datetime(year, month, 1, tzinfo=UTC)


def next_month(year: int, month: int) -> tuple[int, int]:
    return (year + 1, 1) if month == 12 else (year, month + 1)


def month_end(year: int, month: int) -> datetime:
    return month_start(*next_month(year, month))


def hours_in_month(year: int, month: int) -> int:
    return calendar.monthrange(year, month)[1] * 24


def month_of(at: datetime) -> tuple[int, int]:
    """The UTC calendar month an aware datetime falls in."""
    if at.tzinfo is None:
        raise ValueError("billing times must be timezone-aware")
    utc = at.astimezone(UTC)
    return utc.year, utc.month


def hour_index(at: datetime, year: int, month: int) -> int:
    """Index of the hour of the month `at` falls in (clamped to [0, hours]); floor."""
    if at.tzinfo is None:
        raise ValueError("billing times must be timezone-aware")
    seconds = (at.astimezone(UTC) - month_start(year, month)).total_seconds()
    return max(0, min(hours_in_month(year, month), int(seconds // 3600)))


def hourly_segments(
    start_quantity: int, changes: Iterable[Change], year: int, month: int
) -> list[Segment]:
    """The month as segments of constant billed quantity (max held within each hour).

    `start_quantity` is held at the month's first instant; `changes` inside the month (others
    are ignored) must be in time order."""
    total_hours = hours_in_month(year, month)
    begin, end = month_start(year, month), month_end(year, month)
    billed: dict[int, int] = {}  # hour -> max quantity held during it, for hours with changes
    current = start_quantity
    after: dict[int, int] = {}  # hour -> quantity held at its end
    for change in changes:
        if not begin <= change.at.astimezone(UTC) < end:
            continue
        h = hour_index(change.at, year, month)
        billed[h] = max(billed.get(h, current), current, change.quantity)
        current = change.quantity
        after[h] = current
    segments: list[Segment] = []
    quantity, cursor = start_quantity, 0
    for h in sorted(billed):
        if h > cursor:
            segments.append(Segment(cursor, h, quantity))
        segments.append(Segment(h, h + 1, billed[h]))
        quantity, cursor = after[h], h + 1
    if cursor < total_hours:
        segments.append(Segment(cursor, total_hours, quantity))
    merged: list[Segment] = []
    for seg in segments:
        if merged and merged[-1].quantity == seg.quantity:
            merged[-1] = Segment(merged[-1].start, seg.end, seg.quantity)
        else:
            merged.append(seg)
    return merged


def hourly_rate(unit_monthly: Decimal, quantity: int, at: datetime) -> Decimal:
    """What `quantity` slices cost per hour in `at`'s month (unrounded is never shown)."""
    return round_cents(to_decimal(unit_monthly) * quantity / hours_in_month(*month_of(at)))
