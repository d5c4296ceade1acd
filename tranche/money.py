"""The one home of money rounding: every amount Tranche charges, credits or shows passes here.

Rules (docs/billing.md, "Rounding"):
- amounts are `Decimal`, never float; a float argument is refused;
- each invoice line is computed exactly, then rounded once, half-up, to the cent;
- tax is computed on the rounded net total of a document, rounded once, half-up, to the cent;
- a document total is the sum of its rounded lines plus its rounded tax (never re-derived);
- a per-hour rate shown for information (catalogue) has 4 decimals; it is never billed as such.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")
RATE = Decimal("0.0001")
ZERO = Decimal("0.00")


def to_decimal(value: Decimal | int | str) -> Decimal:
    """A Decimal from a Decimal, an int or a string; floats are a bug (binary fractions)."""
    if isinstance(value, float):
        raise TypeError(f"money must not be a float ({value!r}): pass a Decimal or a string")
    return value if isinstance(value, Decimal) else Decimal(value)


def round_cents(amount: Decimal | int | str) -> Decimal:
    """Half-up to the cent (0.005 -> 0.01, -0.005 -> -0.01: symmetric around zero); never -0.00."""
    rounded = to_decimal(amount).quantize(CENT, rounding=ROUND_HALF_UP)
    return abs(rounded) if rounded == 0 else rounded


def round_rate(amount: Decimal | int | str) -> Decimal:
    """A per-hour rate shown for information (4 decimals, half-up); never summed into a bill."""
    return to_decimal(amount).quantize(RATE, rounding=ROUND_HALF_UP)


def tax_of(net: Decimal, rate_percent: Decimal) -> Decimal:
    """Tax on a document's rounded net total at `rate_percent` (e.g. Decimal('20.00'))."""
    return round_cents(to_decimal(net) * to_decimal(rate_percent) / Decimal(100))


def tax_added(net_before: Decimal, added: Decimal, rate_percent: Decimal) -> Decimal:
    """The tax a document's total grows by when `added` joins a net of `net_before`: tax is
    rounded once on the whole net, so this is a difference, not the tax of `added` alone (an
    order's quote, a credit note's tax)."""
    return tax_of(to_decimal(net_before) + to_decimal(added), rate_percent) - tax_of(
        net_before, rate_percent
    )


def total(amounts) -> Decimal:
    """Sum of already-rounded amounts (a mis-rounded input is a bug, so it is refused)."""
    result = ZERO
    for value in amounts:
        amount = to_decimal(value)
        if amount != round_cents(amount):
            raise ValueError(f"{amount} is not rounded to the cent; round each line first")
        result += amount
    return result
