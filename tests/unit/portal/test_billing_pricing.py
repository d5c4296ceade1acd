"""The pricing rules of docs/billing.md: a table of cases in exact cents (100.00 a slice-month)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from tranche import money, pricing
from tranche.pricing import Change

UNIT = Decimal("100.00")
PARIS = ZoneInfo("Europe/Paris")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# (case, (year, month), quantity at month start, changes, expected line amounts)
CASES = [
    ("held all month", (2026, 12), 2, [], ["200.00"]),
    # hour 230 of 744: 514 hours x 100 / 744 = 69.0860...
    ("buy mid-month", (2026, 12), 0, [Change(utc(2026, 12, 10, 14, 25), 1)], ["69.09"]),
    (
        "resize up 1 -> 3",
        (2026, 12),
        1,
        [Change(utc(2026, 12, 16, 0, 0), 3)],
        ["100.00", "103.23"],
    ),
    # the hour of the decrease stays billed at 3; the credit runs from the next hour (383 h)
    (
        "resize down 3 -> 1 is a credit",
        (2026, 12),
        3,
        [Change(utc(2026, 12, 16, 0, 30), 1)],
        ["300.00", "-102.96"],
    ),
    ("cancel in the last hour", (2026, 12), 2, [Change(utc(2026, 12, 31, 23, 59), 0)], ["200.00"]),
    (
        "cancel in the first hour: one hour billed",
        (2026, 12),
        2,
        [Change(utc(2026, 12, 1, 0, 0), 0)],
        ["200.00", "-199.73"],
    ),
    (
        "buy, cancel, re-buy in the same hour: the hour once",
        (2026, 12),
        0,
        [
            Change(utc(2026, 12, 10, 10, 5), 1),
            Change(utc(2026, 12, 10, 10, 20), 0),
            Change(utc(2026, 12, 10, 10, 40), 1),
        ],
        ["69.62"],
    ),
    (
        "buy, resize, cancel, re-buy within 7 minutes (the issue's 9.00 EUR case)",
        (2026, 12),
        0,
        [
            Change(utc(2026, 12, 10, 10, 0), 1),
            Change(utc(2026, 12, 10, 10, 2), 2),
            Change(utc(2026, 12, 10, 10, 4), 0),
            Change(utc(2026, 12, 10, 10, 7), 1),
        ],
        ["139.25", "-69.49"],
    ),
    (
        "buy in the last hour of November",
        (2026, 11),
        0,
        [Change(utc(2026, 11, 30, 23, 30), 1)],
        ["0.14"],
    ),
    ("the next month is whole", (2026, 12), 1, [], ["100.00"]),
    (
        "a change at 00:00:00 belongs to the new month only",
        (2026, 11),
        1,
        [Change(utc(2026, 12, 1, 0, 0), 0)],
        ["100.00"],
    ),
    ("leap February: 696 hours", (2028, 2), 0, [Change(utc(2028, 2, 29, 0, 0), 1)], ["3.45"]),
    ("plain February: 672 hours", (2026, 2), 0, [Change(utc(2026, 2, 28, 0, 0), 1)], ["3.57"]),
    (
        "DST spring forward: 03:30 Paris is 01:30 UTC (hour 673 of 744)",
        (2026, 3),
        0,
        [Change(datetime(2026, 3, 29, 3, 30, tzinfo=PARIS), 1)],
        ["9.54"],
    ),
    (
        "DST fall back: the first 02:30 Paris is 00:30 UTC",
        (2026, 10),
        0,
        [Change(datetime(2026, 10, 25, 2, 30, tzinfo=PARIS), 1)],
        ["22.58"],
    ),
    (
        "DST fall back: the second 02:30 Paris is 01:30 UTC",
        (2026, 10),
        0,
        [Change(datetime(2026, 10, 25, 2, 30, fold=1, tzinfo=PARIS), 1)],
        ["22.45"],
    ),
]


@pytest.mark.parametrize(
    ("case", "ym", "start", "changes", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_invoice_lines(case, ym, start, changes, expected) -> None:
    lines = pricing.invoice_lines(UNIT, start, changes, *ym)
    assert [str(line.amount) for line in lines] == expected, case
    assert all(line.period_end == pricing.month_end(*ym) for line in lines)


def test_lines_sum_to_slice_hours_held() -> None:
    """Full month + pro-rations telescope to the slice-hours held, within a cent per line."""
    changes = [Change(utc(2026, 12, 5, 3), 4), Change(utc(2026, 12, 20, 18, 10), 1)]
    lines = pricing.invoice_lines(UNIT, 2, changes, 2026, 12)
    held = sum(s.quantity * s.hours for s in pricing.hourly_segments(2, changes, 2026, 12))
    exact = UNIT * held / 744
    assert abs(money.total(line.amount for line in lines) - exact) <= Decimal("0.01") * len(lines)
    assert [line.kind for line in lines] == ["month", "increase", "decrease"]


@pytest.mark.parametrize(
    ("from_q", "to_q", "at", "expected"),
    [
        (0, 1, utc(2026, 12, 10, 14, 25), "69.09"),
        (3, 1, utc(2026, 12, 16, 0, 30), "-102.96"),
        (2, 0, utc(2026, 12, 31, 23, 59), "0.00"),
        (0, 1, utc(2028, 2, 29, 0, 0), "3.45"),
    ],
)
def test_change_amount_is_what_the_invoice_bills(from_q, to_q, at, expected) -> None:
    assert str(pricing.change_amount(UNIT, from_q, to_q, at)) == expected


def test_cost_to_counts_started_hours() -> None:
    # one slice all December, until Dec 2 00:00: 25 started hours x 100 / 744 = 3.3602
    assert str(pricing.cost_to(UNIT, 1, [], utc(2026, 12, 2, 0, 0))) == "3.36"
    assert str(pricing.cost_to(UNIT, 1, [], utc(2026, 12, 31, 23, 59))) == "100.00"


def test_naive_times_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        pricing.change_amount(UNIT, 0, 1, datetime(2026, 12, 1))


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
