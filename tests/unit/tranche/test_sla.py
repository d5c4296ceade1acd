"""The SLA table (tranche.sla): availability from downtime, the credit at each boundary, and the
schedule's validation."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tranche import sla

D = Decimal
SCHEDULE = [sla.Tier(D("99.5"), D("10")), sla.Tier(D("99"), D("25")), sla.Tier(D("95"), D("50"))]
HOURS = 720  # a 30-day month: 2,592,000 s; 0.5 % of it is 12,960 s


@pytest.mark.parametrize(
    ("down_seconds", "credit"),
    [
        (0, "0"),
        (12_960, "0"),  # exactly 99.5 %: the target is met
        (12_961, "10"),  # one second more: below the target
        (25_920, "10"),  # exactly 99 %: not below 99
        (25_921, "25"),
        (129_600, "25"),  # exactly 95 %
        (129_601, "50"),
        (2_592_000, "50"),  # down all month
        (9_999_999, "50"),  # more than the month counts as the month
    ],
)
def test_credit_at_each_boundary(down_seconds: int, credit: str) -> None:
    availability = sla.availability_percent(down_seconds, HOURS)
    assert sla.credit_percent(availability, SCHEDULE) == D(credit)


def test_availability_is_exact() -> None:
    assert sla.availability_percent(12_960, HOURS) == D("99.5")
    assert sla.availability_percent(65, 744) == D(100) - D(65) * 100 / D(744 * 3600)
    assert sla.availability_percent(-5, HOURS) == D(100)


def test_tier_order_does_not_matter() -> None:
    availability = sla.availability_percent(30_000, HOURS)
    assert sla.credit_percent(availability, list(reversed(SCHEDULE))) == D("25")
    assert sla.credit_percent(availability, []) == D("0")


def test_a_valid_schedule_has_no_errors() -> None:
    assert sla.schedule_errors(D("99.5"), SCHEDULE) == []


@pytest.mark.parametrize(
    ("target", "tiers", "words"),
    [
        (D("0"), [], "must be above 0"),
        (D("100.5"), [], "at most 100"),
        (
            D("99.5"),
            [sla.Tier(D("99.9"), D("10")), sla.Tier(D("99.5"), D("10"))],
            "above the target",
        ),
        (D("99.5"), [sla.Tier(D("99.5"), D("0"))], "must be above 0"),
        (D("99.5"), [sla.Tier(D("99.5"), D("120"))], "at most 100 %"),
        (
            D("99.5"),
            [sla.Tier(D("99.5"), D("25")), sla.Tier(D("99"), D("10"))],
            "never credit less",
        ),
        (D("99.5"), [sla.Tier(D("99"), D("25"))], "No tier starts at the target"),
        (D("99.5"), [sla.Tier(D("99.5"), D("10")), sla.Tier(D("99.5"), D("20"))], "Two tiers"),
    ],
)
def test_bad_schedules_say_what_to_fix(target, tiers, words) -> None:
    errors = sla.schedule_errors(target, tiers)
    assert any(words in e for e in errors), errors


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(min_value=-100_000, max_value=-1), max_size=8),
    st.integers(min_value=-1_000, max_value=200_000),
)
def test_credits_are_cut_to_the_charge_and_never_grow(cents, limit_cents) -> None:
    """Whatever the credits and the charge: together at most the charge (none for a charge of
    0 or less), each at most itself, the first ones kept whole while the charge lasts."""
    amounts = [Decimal(c) / 100 for c in cents]
    limit = Decimal(limit_cents) / 100
    cut = sla.bounded(amounts, limit)
    assert len(cut) == len(amounts)
    assert -sum(cut, Decimal(0)) <= max(limit, Decimal(0))
    assert all(a <= c <= 0 for a, c in zip(amounts, cut, strict=True))
    if -sum(amounts, Decimal(0)) <= limit:
        assert cut == amounts
