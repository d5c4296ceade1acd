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


def _overage(cancel_at: datetime, released: datetime, *, until: datetime | None = None) -> int:
    """Slice-hours of overage in December of one slice bought on Dec 1 and cancelled at
    `cancel_at` with a 1 h grace, its claim held until `released`."""
    history = [
        priced.Order(utc(2026, 12, 1), 1, P, ref=1),
        priced.Order(cancel_at, 0, P, ref=2),
    ]
    return priced.overage_slice_hours(
        history,
        [(utc(2026, 12, 1, 0, 5), released)],
        3600,
        year=2026,
        month=12,
        until=until or utc(2027, 1, 1),
    )


def test_the_hour_a_cancels_grace_ends_in_is_billed() -> None:
    """Cancelled at 17:08:58, the pod kept: billing starts at 18:08:58 (the cancel page's "60
    minutes after this change"), so the 18:00 hour is a started hour of overage."""
    cancel = utc(2026, 12, 10, 17, 8, 58)
    assert _overage(cancel, utc(2026, 12, 10, 18, 30)) == 1
    assert _overage(cancel, utc(2026, 12, 10, 19, 0, 1)) == 2
    # released inside the grace (18:05, 18:08:58 itself): nothing
    assert _overage(cancel, utc(2026, 12, 10, 18, 5)) == 0
    assert _overage(cancel, utc(2026, 12, 10, 18, 8, 58)) == 0
    # the page at 18:09 shows the hour the invoice will bill
    assert _overage(cancel, None, until=utc(2026, 12, 10, 18, 9)) == 1


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=0, max_value=700 * 3600),  # second of December of the cancel
    st.integers(min_value=1, max_value=40 * 3600),  # seconds the claim is held after it
)
def test_overage_bills_every_started_hour_from_the_graces_end(cancel_s, held_s) -> None:
    """Whatever the instants: overage hours = the hours from the one the grace ends in to the
    one the claim is released in (none when released by the grace's end)."""
    cancel = utc(2026, 12, 1) + timedelta(seconds=cancel_s)
    released = min(cancel + timedelta(seconds=held_s), utc(2027, 1, 1))
    grace_end = cancel + timedelta(hours=1)
    if released <= grace_end:
        expected = 0
    else:
        first = pricing.hour_index(grace_end, 2026, 12)
        last = pricing.hour_index(released - timedelta(microseconds=1), 2026, 12)
        expected = last - first + 1
    assert _overage(cancel, released) == expected
