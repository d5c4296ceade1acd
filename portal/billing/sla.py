"""SLA credits of a month: each slice's outage against its product's SLA (docs/billing.md,
"SLA credits"). Reads only; the month's bills (`charges.month_bills`) carry the credits, so the
invoice, its preview and the billing page show what is credited.

A credit is the schedule's percentage of what the slice was charged this month
(`priced.slice_charges_at`: its unit price x the hours its lines bill / hours in the month),
negative, rounded once (`tranche.money`); a slice's credits never exceed its charge, nor a
subscription's its charges (lines and overage), so an invoice's credits never exceed its charges.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal

from portal.billing.models import ProductSla
from portal.cluster.models import SliceOutage
from portal.cluster.outages import downtime_seconds, month_outages
from tranche import money, priced, pricing
from tranche import sla as rule


@dataclass(frozen=True)
class Credit:
    """One slice's SLA credit in a month (a negative invoice line)."""

    outage: SliceOutage
    downtime_seconds: int
    availability: Decimal  # percent, exact
    target: Decimal
    credit_percent: Decimal
    month_charge: Decimal  # what the slice was charged this month, rounded
    amount: Decimal  # negative, rounded to the cent
    until: datetime | None = None  # the downtime's end (None: the month's end)


def schedules(product_ids: set[int]) -> dict[int, tuple[Decimal, list[rule.Tier]]]:
    """Per product id with an SLA, (target, tiers)."""
    found: dict[int, tuple[Decimal, list[rule.Tier]]] = {}
    for sla in ProductSla.objects.filter(product_id__in=product_ids).prefetch_related("tiers"):
        tiers = [rule.Tier(t.below_percent, t.credit_percent) for t in sla.tiers.all()]
        found[sla.product_id] = (sla.target_percent, tiers)
    return found


def month_credits(
    subs, year: int, month: int, until: datetime, charged: dict[tuple[int, int], Decimal]
) -> dict[tuple[int, int], list]:
    """Per (project id, product id), the credits of the month's outages so far (up to `until`,
    the month's end for its invoice). A product without an SLA credits nothing. `charged` is
    each subscription's charge of the month (its lines and overage): its credits never exceed
    it, so an invoice's credits never exceed its charges."""
    begin, end = pricing.month_start(year, month), pricing.month_end(year, month)
    stop = min(until, end)
    if not subs or stop <= begin:
        return {}
    outages = month_outages(list({s.project_id for s in subs}), begin, stop)
    slas = schedules({o.product_id for o in outages})
    hours = pricing.hours_in_month(year, month)
    by_key = {(s.project_id, s.product_id): s for s in subs}
    credits: dict[tuple[int, int], list[Credit]] = {}
    for outage in outages:
        key = (outage.project_id, outage.product_id)
        sub = by_key.get(key)
        if outage.product_id not in slas or sub is None:
            continue
        credit = _credit(
            outage,
            sub.orders,
            slas[outage.product_id],
            year=year,
            month=month,
            stop=stop,
            hours=hours,
        )
        if credit is not None:
            credits.setdefault(key, []).append(credit)
    return {key: _bound(found, charged.get(key, Decimal(0))) for key, found in credits.items()}


def _credit(outage, orders, sla, *, year: int, month: int, stop: datetime, hours: int):
    """One outage's credit: the tier's percentage of what its slice (the cheapest held at the
    failure) is charged this month; the downtime ends with the plan (quantity 0) at the latest.
    None when nothing is owed (no slice billed at the failure, availability above the tiers)."""
    target, tiers = sla
    held = priced.slice_charges_at(orders, year, month, outage.started_at)
    if not held:
        return None  # no slice of the plan was billed then (cancelled before the failure)
    plan_end = priced.plan_end(orders, outage.started_at)
    seconds = downtime_seconds(
        outage, pricing.month_start(year, month), min(stop, plan_end or stop)
    )
    availability = rule.availability_percent(seconds, hours)
    percent = rule.credit_percent(availability, tiers)
    if not percent:
        return None
    slice_charge = min(held)
    amount = money.round_cents(-slice_charge * percent / 100)
    if not amount:
        return None
    charge = money.round_cents(slice_charge)
    ends = [t for t in (outage.ended_at, plan_end) if t is not None and t < stop]
    until = min(ends) if ends else None
    return Credit(outage, seconds, availability, target, percent, charge, amount, until)


def _bound(credits: list[Credit], charged: Decimal) -> list[Credit]:
    """The credits, cut so that together they never exceed the subscription's charge, nor one
    slice's (claim's) credits its own month charge; those cut to nothing are dropped."""
    cut = rule.bounded([c.amount for c in credits], charged)
    out, per_claim = [], {}
    for credit, within_charge in zip(credits, cut, strict=True):
        claim = credit.outage.usage_record_id or f"outage-{credit.outage.pk}"
        left = per_claim.get(claim, credit.month_charge)
        amount = max(within_charge, -left)
        per_claim[claim] = left + amount
        if amount:
            out.append(replace(credit, amount=amount))
    return out


def describe(credit: Credit, product_name: str, project_label: str, currency: str) -> str:
    """The invoice line's words: the outage beside the credit (what staff and tenant see)."""
    o = credit.outage
    end = f"{credit.until:%Y-%m-%d %H:%M:%S} UTC" if credit.until else "the month's end"
    xid = f"XID {o.xid}" if o.xid is not None else "a fatal error"
    return (
        f"SLA credit, {product_name} in {project_label}: pod {o.pod_name}'s GPU failed ({xid}) "
        f"{o.started_at:%Y-%m-%d %H:%M:%S} UTC, down until {end} ({credit.downtime_seconds} s): "
        f"availability {credit.availability.quantize(Decimal('0.0001'))} % below "
        f"{credit.target} % -> {credit.credit_percent.normalize():f} % of "
        f"{credit.month_charge} {currency}"
    )[:300]
