"""The SLA rule (pure, dependency-free): a slice's availability in a month and the credit its
product's schedule gives for it (docs/billing.md, "SLA credits").

Availability is the share of the month's seconds the slice was not down: 1 - downtime /
(hours in the month x 3600), exact in Decimal. A schedule is tiers "below X % -> Y % credit";
the lowest threshold the availability is strictly below wins (below 95 % beats below 99 %).
Exactly at a threshold is not below it: 99.5 % against a 99.5 % target credits nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from itertools import pairwise

HUNDRED = Decimal(100)


@dataclass(frozen=True)
class Tier:
    """Below `below_percent` availability, credit `credit_percent` of the slice's month charge."""

    below_percent: Decimal
    credit_percent: Decimal


def availability_percent(downtime_seconds: int, month_hours: int) -> Decimal:
    """The slice's availability in a month of `month_hours` hours, in percent (exact)."""
    total = month_hours * 3600
    down = min(max(downtime_seconds, 0), total)
    return (Decimal(total - down) * HUNDRED) / Decimal(total)


def credit_percent(availability: Decimal, tiers: Sequence[Tier]) -> Decimal:
    """The credit (percent of the month charge) the schedule gives for `availability`: the
    tier with the lowest threshold the availability is below; 0 when above every one."""
    below = [t for t in tiers if availability < t.below_percent]
    return min(below, key=lambda t: t.below_percent).credit_percent if below else Decimal(0)


def bounded(amounts: Sequence[Decimal], limit: Decimal) -> list[Decimal]:
    """Credits (negative amounts, in order) cut so that together they never exceed `limit` (a
    charge, >= 0): each keeps what is left of the limit after those before it."""
    left, out = max(limit, Decimal(0)), []
    for amount in amounts:
        take = min(-amount, left)
        out.append(-take)
        left -= take
    return out


def schedule_errors(target: Decimal, tiers: Sequence[Tier]) -> list[str]:
    """What is wrong with an SLA setting, in words staff can act on (empty: valid)."""
    errors = []
    if not Decimal(0) < target <= HUNDRED:
        errors.append(f"The availability target {target} % must be above 0 and at most 100.")
    seen: set[Decimal] = set()
    for t in tiers:
        if t.below_percent in seen:
            errors.append(f"Two tiers start below {t.below_percent} %; keep one of them.")
        seen.add(t.below_percent)
        if t.below_percent > target:
            errors.append(
                f"The tier below {t.below_percent} % is above the target ({target} %): a slice "
                "that meets its target is owed nothing. Lower it to the target or below."
            )
        if not Decimal(0) < t.credit_percent <= HUNDRED:
            errors.append(
                f"The credit {t.credit_percent} % (below {t.below_percent} %) must be above 0 "
                "and at most 100 % of the month charge."
            )
    ordered = sorted(tiers, key=lambda t: t.below_percent, reverse=True)
    for upper, lower in pairwise(ordered):
        if lower.credit_percent < upper.credit_percent:
            errors.append(
                f"Below {lower.below_percent} % credits {lower.credit_percent} %, less than "
                f"below {upper.below_percent} % ({upper.credit_percent} %): a worse month must "
                "never credit less. Raise it."
            )
    if tiers and target not in seen:
        errors.append(
            f"No tier starts at the target ({target} %): a slice just below it would be owed "
            "nothing. Add a tier below the target."
        )
    return errors
