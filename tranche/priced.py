"""Per-order priced lines (pure, no Django): each slice is billed at the price its order confirmed.

`tranche.pricing` holds the calendar (hours of a month) and the hourly rule; this module adds the
prices. A subscription's history is a list of `Order`s (when, target quantity, unit price, id).
Each increase adds slices priced at its order's unit price; each decrease removes the most
recently added slices (last in, first out) and credits them at the price they were bought at. So
a price change never re-prices slices bought before it (docs/billing.md, "Prices per order").

The hourly rule stays: each hour is billed at the highest quantity held during it. A slice added
in an hour where an earlier slice was released (a re-buy in the same hour) is billed from the next
hour, because that hour is already billed by the released slice.

Every line belongs to one order (`Line.order`), so what an order adds to the invoice is the sum of
its lines: the confirmation page quotes exactly that (`order_amount`), and the month's invoice is
the sum of every order's lines plus the full-month lines of slices held when the month began.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from tranche.money import round_cents, to_decimal
from tranche.pricing import HOUR, hour_index, hours_in_month, month_end, month_of, month_start

QUOTE = -1  # the ref of the order being quoted (placed orders have positive ids)


@dataclass(frozen=True)
class Order:
    """The subscription's quantity became `quantity` at `at`, slices added priced `unit_monthly`."""

    at: datetime
    quantity: int
    unit_monthly: Decimal
    ref: int | None = None  # the order's id (None: a quote not yet placed)


@dataclass(frozen=True)
class Line:
    """`delta` slices at `unit_monthly` from hour `start` to the month's end (negative: credit)."""

    kind: str  # "month" | "increase" | "decrease"
    order: int | None  # the order this line belongs to (None: held since before the month)
    delta: int
    unit_monthly: Decimal
    quantity: int  # the subscription's quantity after the order (for the description)
    period_start: datetime
    period_end: datetime
    hours: int
    amount: Decimal


@dataclass
class _Slice:
    unit: Decimal
    added_by: int  # index in the month's orders; -1: held when the month began
    start: int  # hour it is billed from (0 for held at month start)
    end: int | None = None  # hour it was released in (None: still held at month end)
    removed_by: int = -1


def amount(unit_monthly: Decimal, delta: int, hours: int, total_hours: int) -> Decimal:
    """One line's amount, computed exactly and rounded once."""
    return round_cents(to_decimal(unit_monthly) * delta * hours / total_hours)


def held_at(orders: Sequence[Order], at: datetime) -> list[Decimal]:
    """The unit prices of the slices held at `at`, oldest first (orders before `at`, in order)."""
    stack: list[Decimal] = []
    for order in orders:
        if order.at >= at:
            break
        if order.quantity > len(stack):
            stack.extend([to_decimal(order.unit_monthly)] * (order.quantity - len(stack)))
        else:
            del stack[order.quantity :]
    return stack


def _slices(orders: Sequence[Order], year: int, month: int) -> tuple[list[_Slice], list[Order]]:
    """Every slice held during the month, with the hours it is billed for."""
    begin, end = month_start(year, month), month_end(year, month)
    inside = [o for o in orders if begin <= o.at < end]
    slices = [_Slice(unit=u, added_by=-1, start=0) for u in held_at(orders, begin)]
    alive = list(range(len(slices)))
    hour, peak = -1, 0  # the hour of the last order, and the most slices held during it
    for index, order in enumerate(inside):
        h = hour_index(order.at, year, month)
        if h != hour:
            hour, peak = h, len(alive)
        if order.quantity > len(alive):
            for _ in range(order.quantity - len(alive)):
                # a slot of this hour already billed (for a slice released in it) covers the hour
                covered = len(alive) < peak
                slices.append(
                    _Slice(unit=to_decimal(order.unit_monthly), added_by=index, start=h + covered)
                )
                alive.append(len(slices) - 1)
                peak = max(peak, len(alive))
        else:
            for position in alive[order.quantity :]:
                slices[position].end = h
                slices[position].removed_by = index
            del alive[order.quantity :]
    return slices, inside


def month_lines(orders: Sequence[Order], year: int, month: int) -> list[Line]:
    """The month's lines of one subscription: full-month lines for what was held when it began,
    one increase line per order and price start, one credit line per decrease and price."""
    total_hours = hours_in_month(year, month)
    begin, end = month_start(year, month), month_end(year, month)
    slices, inside = _slices(orders, year, month)
    grouped: dict[tuple, int] = defaultdict(int)
    for s in slices:
        # a slice re-bought and released in one already-billed hour keeps both its lines (they
        # cancel): a later order never changes an earlier order's lines
        kind = "month" if s.added_by < 0 else "increase"
        grouped[(s.added_by, kind, s.start, s.unit)] += 1
        if s.end is not None:
            grouped[(s.removed_by, "decrease", s.end + 1, s.unit)] -= 1
    lines = []
    for (index, kind, start, unit), delta in sorted(grouped.items(), key=_line_order):
        hours = total_hours - start
        if delta == 0 or hours <= 0:
            continue
        order = inside[index] if index >= 0 else None
        lines.append(
            Line(
                kind=kind,
                order=order.ref if order else None,
                delta=delta,
                unit_monthly=unit,
                quantity=order.quantity if order else -delta if delta < 0 else delta,
                period_start=begin + start * HOUR,
                period_end=end,
                hours=hours,
                amount=amount(unit, delta, hours, total_hours),
            )
        )
    return lines


def _line_order(item) -> tuple:
    (index, kind, start, unit), _ = item
    return (index, start, kind != "month", str(unit))


def slice_charges_at(orders: Sequence[Order], year: int, month: int, at: datetime) -> list[Decimal]:
    """What each slice held at `at` is charged in the month, exact (unit price x the hours its
    lines bill / hours in the month, before rounding): the bound of its SLA credit."""
    total_hours = hours_in_month(year, month)
    slices, inside = _slices(orders, year, month)
    charges = []
    for s in slices:
        added = inside[s.added_by].at if s.added_by >= 0 else None
        removed = inside[s.removed_by].at if s.end is not None else None
        if (added is not None and added > at) or (removed is not None and removed <= at):
            continue
        hours = max(0, (total_hours if s.end is None else s.end + 1) - s.start)
        charges.append(s.unit * hours / total_hours)
    return charges


def plan_end(orders: Sequence[Order], after: datetime) -> datetime | None:
    """When the subscription's quantity next fell to 0 at or after `after` (None: it did not)."""
    return next((o.at for o in orders if o.at >= after and o.quantity == 0), None)


def order_lines(orders: Sequence[Order], new: Order) -> list[Line]:
    """The lines placing `new` after `orders` (in time order, all before it) adds to its month's
    invoice. Earlier orders' lines never change when a later order comes, so these are exactly
    the difference the order makes to the invoice."""
    marker = Order(at=new.at, quantity=new.quantity, unit_monthly=new.unit_monthly, ref=QUOTE)
    lines = month_lines([*orders, marker], *month_of(new.at))
    return [line for line in lines if line.order == QUOTE]


def order_amount(orders: Sequence[Order], new: Order) -> Decimal:
    """What `new` adds to its month's invoice (negative: a credit): the sum of its own lines,
    each rounded as the invoice rounds it."""
    return sum((line.amount for line in order_lines(orders, new)), Decimal("0.00"))


def hourly_peaks(
    intervals: Sequence[tuple[datetime, datetime | None]], year: int, month: int, until: datetime
) -> dict[int, int]:
    """Per hour of the month, the most intervals (claims held) open at once in it (up to
    `until`; an open interval runs until then)."""
    begin, end = month_start(year, month), min(month_end(year, month), until)
    spans = [(max(a, begin), min(b or end, end)) for a, b in intervals]
    spans = [(a, b) for a, b in spans if a < b]
    peaks: dict[int, int] = {}
    for a, b in spans:
        for h in range(hour_index(a, year, month), hour_index(b - HOUR / 3600, year, month) + 1):
            start = begin + h * HOUR
            points = {max(start, a)} | {x for x, _ in spans if start <= x < start + HOUR}
            peaks[h] = max(peaks.get(h, 0), *(_open_at(spans, t) for t in points))
    return peaks


def _open_at(spans: Sequence[tuple[datetime, datetime]], at: datetime) -> int:
    return sum(1 for a, b in spans if a <= at < b)


def _peak_between(spans: Sequence[tuple[datetime, datetime]], lo: datetime, hi: datetime) -> int:
    """The most spans open at once in [lo, hi)."""
    points = {lo} | {a for a, _ in spans if lo <= a < hi}
    return max(_open_at(spans, t) for t in points)


def overage_slice_hours(
    orders: Sequence[Order],
    intervals: Sequence[tuple[datetime, datetime | None]],
    grace_seconds: int,
    *,
    year: int,
    month: int,
    until: datetime,
) -> int:
    """Slice-hours held beyond the entitlement after a decrease's grace period ended: for each
    hour that ends after the latest decrease before it plus the grace, the most claims held in
    it from the grace's end on, less the quantity billed for it (docs/billing.md, "After a
    cancel"). The hour the grace ends in is a started hour of billing like any other: a cancel
    at 17:08:58 with a 1 h grace bills the 18:00 hour if a claim is held at 18:08:58 or later."""
    lines = month_lines(orders, year, month)
    billed = [0] * hours_in_month(year, month)
    for line in lines:
        for h in range(len(billed) - line.hours, len(billed)):
            billed[h] += line.delta
    decreases, held = [], 0
    for order in orders:
        if order.quantity < held:
            decreases.append(order.at)
        held = order.quantity
    begin, stop = month_start(year, month), min(month_end(year, month), until)
    spans = [(max(a, begin), min(b or stop, stop)) for a, b in intervals]
    spans = [(a, b) for a, b in spans if a < b]
    grace = grace_seconds * HOUR / 3600
    extra = 0
    for h, hour_peak in hourly_peaks(intervals, year, month, until).items():
        start = begin + h * HOUR
        before = [at for at in decreases if at < start + HOUR]
        grace_end = before[-1] + grace if before else start
        if grace_end >= start + HOUR:
            continue  # the whole hour lies inside the grace period of the latest decrease
        # the grace ends inside this hour: it is billed if a claim is held from then on
        peak = _peak_between(spans, grace_end, start + HOUR) if grace_end > start else hour_peak
        extra += max(0, peak - billed[h])
    return extra
