"""SLA credits of a month: each slice's outage against its product's SLA (docs/billing.md,
"SLA credits"). Reads only; the month's bills (`charges.month_bills`) carry the credits, so the
invoice, its preview and the billing page show what is credited.

A credit is priced by the charge's own code: the slice's month charge is
`priced.amount(unit price, 1, hours, hours)` at its subscription's latest unit price, and the
credit is that amount at the schedule's percentage, negative, rounded once (`tranche.money`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from portal.billing import downtime
from portal.billing.models import ProductSla, SliceOutage
from tranche import priced, pricing
from tranche import sla as rule


@dataclass(frozen=True)
class Credit:
    """One slice's SLA credit in a month (a negative invoice line)."""

    outage: SliceOutage
    downtime_seconds: int
    availability: Decimal  # percent, exact
    target: Decimal
    credit_percent: Decimal
    month_charge: Decimal
    amount: Decimal  # negative, rounded to the cent


def schedules(product_ids: set[int]) -> dict[int, tuple[Decimal, list[rule.Tier]]]:
    """Per product id with an SLA, (target, tiers)."""
    found: dict[int, tuple[Decimal, list[rule.Tier]]] = {}
    for sla in ProductSla.objects.filter(product_id__in=product_ids).prefetch_related("tiers"):
        tiers = [rule.Tier(t.below_percent, t.credit_percent) for t in sla.tiers.all()]
        found[sla.product_id] = (sla.target_percent, tiers)
    return found


def month_credits(subs, year: int, month: int, until: datetime) -> dict[tuple[int, int], list]:
    """Per (project id, product id), the credits of the month's outages so far (up to `until`,
    the month's end for its invoice). A product without an SLA credits nothing."""
    begin, end = pricing.month_start(year, month), pricing.month_end(year, month)
    stop = min(until, end)
    if not subs or stop <= begin:
        return {}
    outages = downtime.month_outages(list({s.project_id for s in subs}), begin, stop)
    slas = schedules({o.product_id for o in outages})
    hours = pricing.hours_in_month(year, month)
    prices = {(s.project_id, s.product_id): s.unit_monthly_price for s in subs}
    credits: dict[tuple[int, int], list[Credit]] = {}
    for outage in outages:
        key = (outage.project_id, outage.product_id)
        if outage.product_id not in slas or key not in prices:
            continue
        target, tiers = slas[outage.product_id]
        seconds = downtime.downtime_seconds(outage, begin, stop)
        availability = rule.availability_percent(seconds, hours)
        percent = rule.credit_percent(availability, tiers)
        if not percent:
            continue
        charge = priced.amount(prices[key], 1, hours, hours)
        amount = priced.amount(prices[key] * percent / 100, -1, hours, hours)
        credits.setdefault(key, []).append(
            Credit(outage, seconds, availability, target, percent, charge, amount)
        )
    return credits


def describe(credit: Credit, product_name: str, project_label: str, currency: str) -> str:
    """The invoice line's words: the outage beside the credit (what staff and tenant see)."""
    o, event = credit.outage, credit.outage.health_event
    end = f"{o.ended_at:%Y-%m-%d %H:%M:%S} UTC" if o.ended_at else "the month's end"
    xid = f"XID {event.xid}" if event.xid is not None else "a fatal error"
    return (
        f"SLA credit, {product_name} in {project_label}: pod {o.pod_name}'s GPU failed ({xid}) "
        f"{o.started_at:%Y-%m-%d %H:%M:%S} UTC, down until {end} ({credit.downtime_seconds} s): "
        f"availability {credit.availability.quantize(Decimal('0.0001'))} % below "
        f"{credit.target} % -> {credit.credit_percent.normalize():f} % of "
        f"{credit.month_charge} {currency}"
    )[:300]
