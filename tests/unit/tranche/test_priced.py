"""Per-order priced lines (tranche.priced): quotes add up to the invoice, prices stick to orders."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from tranche import priced, pricing

P = Decimal("100.00")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_docs_seven_minute_example_quotes_what_is_billed() -> None:
    """Buy 1, resize to 2, cancel, re-buy 1 within 7 minutes at 10:00 on Dec 10 (hour 226)."""
    history: list[priced.Order] = []
    quotes = []
    for n, (quantity, minute) in enumerate(((1, 0), (2, 2), (0, 5), (1, 7)), start=1):
        new = priced.Order(utc(2026, 12, 10, 10, minute), quantity, P, ref=n)
        quotes.append(priced.order_amount(history, new))
        history.append(new)
    # the re-buy's hour is already billed (by the slices released in it): from the next hour
    assert [str(q) for q in quotes] == ["69.62", "69.62", "-138.98", "69.49"]
    lines = priced.month_lines(history, 2026, 12)
    assert sum(line.amount for line in lines) == sum(quotes)


def test_a_price_change_applies_only_to_later_orders() -> None:
    history = [
        priced.Order(utc(2026, 12, 10, 14, 25), 1, P, ref=1),
        priced.Order(utc(2026, 12, 20, 0, 0), 2, Decimal("111.11"), ref=2),
    ]
    december = priced.month_lines(history, 2026, 12)
    assert [(line.order, line.unit_monthly, str(line.amount)) for line in december] == [
        (1, P, "69.09"),  # hour 230 of 744, at the buy's price
        (2, Decimal("111.11"), "43.01"),
    ]
    january = priced.month_lines(history, 2027, 1)  # both held all month, each at its own price
    assert sorted((line.kind, line.unit_monthly, line.amount) for line in january) == [
        ("month", Decimal("100.00"), Decimal("100.00")),
        ("month", Decimal("111.11"), Decimal("111.11")),
    ]


def test_a_decrease_credits_the_latest_slices_at_their_price() -> None:
    history = [
        priced.Order(utc(2026, 12, 1, 0, 0), 1, P, ref=1),
        priced.Order(utc(2026, 12, 2, 0, 0), 2, Decimal("200.00"), ref=2),
    ]
    credit = priced.order_lines(history, priced.Order(utc(2026, 12, 3, 0, 0), 1, P))
    assert [(line.delta, line.unit_monthly) for line in credit] == [(-1, Decimal("200.00"))]


orders = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=744 * 60 - 1),  # minute of December
        st.integers(min_value=0, max_value=4),
        st.sampled_from([Decimal("90.00"), Decimal("170.00"), Decimal("320.00")]),
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(orders, st.integers(min_value=0, max_value=3))
def test_quotes_add_up_to_the_invoice_and_hours_to_the_hourly_rule(raw, start) -> None:
    """Whatever the history: the sum of the quotes (plus what was held since November) is the
    invoice's net to the cent, and each hour bills the most slices held in it."""
    begin = utc(2026, 12, 1)
    history = [priced.Order(utc(2026, 11, 15), start, P, ref=0)] if start else []
    quotes = []
    for ref, (minute, quantity, price) in enumerate(sorted(raw, key=lambda r: r[0]), start=1):
        new = priced.Order(begin + timedelta(minutes=minute), quantity, price, ref=ref)
        current = len(priced.held_at(history, new.at + timedelta(microseconds=1)))
        if quantity == current:
            continue  # the portal refuses an order that changes nothing
        quotes.append(priced.order_amount(history, new))
        history.append(new)
    lines = priced.month_lines(history, 2026, 12)
    held_since_november = sum(line.amount for line in lines if line.order is None)
    assert sum(line.amount for line in lines) == held_since_november + sum(quotes)
    billed = [0] * 744
    for line in lines:
        for hour in range(744 - line.hours, 744):
            billed[hour] += line.delta
    changes = [pricing.Change(o.at, o.quantity) for o in history if o.at >= begin]
    expected = [0] * 744
    for seg in pricing.hourly_segments(start, changes, 2026, 12):
        for hour in range(seg.start, seg.end):
            expected[hour] = seg.quantity
    assert billed == expected
