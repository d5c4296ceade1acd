"""Pure money rules (Decimal only). The first month is charged pro-rata from the order's day.

- pro-rata fraction = remaining days in the month, today included / days in the month;
- buying or growing charges the added slices x monthly unit price x that fraction;
- shrinking or cancelling charges nothing now and refunds nothing: the new monthly total applies
  from the next month.
"""

from __future__ import annotations

import calendar
from datetime import date
from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")


def prorata_fraction(today: date) -> tuple[int, int]:
    """(remaining days including today, days in the month)."""
    days = calendar.monthrange(today.year, today.month)[1]
    return days - today.day + 1, days


def prorata_amount(monthly: Decimal, today: date) -> Decimal:
    """`monthly` x remaining days / days in month, rounded half-up to the cent."""
    remaining, days = prorata_fraction(today)
    return (monthly * remaining / days).quantize(CENT, rounding=ROUND_HALF_UP)


def order_charge(unit_monthly: Decimal, from_qty: int, to_qty: int, today: date) -> Decimal:
    """What the order costs now: pro-rata of the added slices only (never negative)."""
    added = max(0, to_qty - from_qty)
    return prorata_amount(unit_monthly * added, today)


def monthly_total(unit_monthly: Decimal, quantity: int) -> Decimal:
    """The monthly price of `quantity` slices."""
    return (unit_monthly * quantity).quantize(CENT, rounding=ROUND_HALF_UP)
