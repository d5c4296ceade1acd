"""Pro-rata and order charges: pure Decimal arithmetic."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from portal.orders.pricing import monthly_total, order_charge, prorata_amount, prorata_fraction


def test_fraction_counts_today():
    assert prorata_fraction(date(2026, 2, 1)) == (28, 28)
    assert prorata_fraction(date(2026, 2, 28)) == (1, 28)
    assert prorata_fraction(date(2028, 2, 29)) == (1, 29)
    assert prorata_fraction(date(2026, 1, 17)) == (15, 31)


def test_amounts():
    assert prorata_amount(Decimal("90.00"), date(2026, 4, 1)) == Decimal("90.00")
    assert prorata_amount(Decimal("90.00"), date(2026, 4, 16)) == Decimal("45.00")
    assert prorata_amount(Decimal("100.00"), date(2026, 1, 31)) == Decimal("3.23")
    assert order_charge(Decimal("90.00"), 0, 2, date(2026, 4, 16)) == Decimal("90.00")
    assert order_charge(Decimal("90.00"), 3, 1, date(2026, 4, 16)) == Decimal("0.00")
    assert monthly_total(Decimal("90.00"), 3) == Decimal("270.00")


@given(
    st.decimals(min_value=0, max_value=100000, places=2),
    st.dates(min_value=date(2000, 1, 1), max_value=date(2100, 12, 31)),
    st.integers(0, 16),
    st.integers(0, 16),
)
def test_charge_bounded_by_a_full_month(unit, today, before, after):
    charge = order_charge(unit, before, after, today)
    assert Decimal(0) <= charge <= monthly_total(unit, max(0, after - before))
