"""The pricing rules of docs/billing.md: a table of cases in exact cents (100.00 a slice-month)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from tranche import money, pricing

UNIT = Decimal("100.00")
PARIS = ZoneInfo("Europe/Paris")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_naive_times_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        pricing.month_of(datetime(2026, 12, 1))


@pytest.mark.parametrize(
    ("value", "expected"),
    [("0.005", "0.01"), ("-0.005", "-0.01"), ("0.0049", "0.00"), ("1.125", "1.13"), (3, "3.00")],
)
def test_round_cents_half_up(value, expected) -> None:
    assert str(money.round_cents(value)) == expected


def test_money_refuses_floats_and_unrounded_sums() -> None:
    with pytest.raises(TypeError, match="float"):
        money.round_cents(0.1)
    with pytest.raises(ValueError, match="not rounded"):
        money.total([Decimal("0.001")])


def test_tax_on_rounded_net() -> None:
    assert money.tax_of(Decimal("100.00"), Decimal("20")) == Decimal("20.00")
    assert money.tax_of(Decimal("0.05"), Decimal("19")) == Decimal("0.01")
    assert money.tax_of(Decimal("69.09"), Decimal("0")) == Decimal("0.00")


def test_tax_added_in_steps_is_the_tax_of_the_whole() -> None:
    """What each order or credit note adds (the tax of the net after it less before it) sums to
    the document's tax of its whole net, where taxing each part alone would not."""
    rate, parts = Decimal("20"), [Decimal("30.93"), Decimal("0.94"), Decimal("32.88")]
    added, net = [], money.ZERO
    for part in parts:
        added.append(money.tax_added(net, part, rate))
        net += part
    assert added == [Decimal("6.19"), Decimal("0.18"), Decimal("6.58")]
    assert sum(added) == money.tax_of(net, rate) == Decimal("12.95")
    assert sum(money.tax_of(p, rate) for p in parts) == Decimal("12.96")  # per part: a cent more
