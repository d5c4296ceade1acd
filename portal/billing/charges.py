"""Turn an organization's order history into the month's priced lines (reads only).

The entitlement timeline of a subscription is its orders: each order set the subscription's
quantity when it was placed (`created_at`), whatever became of its provisioning, so the quantity
held at an instant is the target of the last order placed before it. Each order's slices are
priced at the unit price that order was confirmed at (`tranche.priced`): a later price change
never re-prices them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db.models import Q

from portal.billing import sla
from portal.orders.models import Order
from tranche import money, priced, pricing


@dataclass(frozen=True)
class SubscriptionMonth:
    """One subscription's entitlement in one month: what pricing needs, plus names."""

    project_id: int
    project_label: str
    product_id: int
    product_name: str
    device_class: str
    unit_monthly_price: Decimal  # the latest order's (what one more slice costs now)
    currency: str
    start_quantity: int
    changes: tuple[pricing.Change, ...]
    orders: tuple[priced.Order, ...] = ()  # every order up to the month's end, in time order

    def lines(self, year: int, month: int) -> list[priced.Line]:
        """The month's priced lines of this subscription (what its invoice lines bill)."""
        return priced.month_lines(self.orders, year, month)


def subscription_months(
    organization_ids: list[int] | None, year: int, month: int
) -> dict[int, list[SubscriptionMonth]]:
    """Per organization id, its subscriptions that held anything in the month (two queries).

    A subscription whose quantity was 0 all month (cancelled in an earlier month) is kept when
    its project still held claims of the product in the month: slices held past a cancel's grace
    period are billed in every month they are held (docs/billing.md, "After a cancel")."""
    begin, end = pricing.month_start(year, month), pricing.month_end(year, month)
    orders = Order.objects.filter(created_at__lt=end).order_by(
        "subscription_id", "created_at", "id"
    )
    if organization_ids is not None:
        orders = orders.filter(organization_id__in=organization_ids)
    rows = orders.values_list(
        "organization_id",
        "subscription_id",
        "project_id",
        "project__organization__slug",
        "project__slug",
        "product_id",
        "product__name",
        "product__device_class",
        "unit_monthly_price",
        "currency",
        "created_at",
        "quantity",
        "pk",
    )
    held = _held_pairs(organization_ids, begin, end)
    grouped: dict[int, list[tuple]] = defaultdict(list)
    for row in rows:
        grouped[row[1]].append(row)
    result: dict[int, list[SubscriptionMonth]] = defaultdict(list)
    for sub_rows in grouped.values():
        first = sub_rows[0]
        start = 0
        changes: list[pricing.Change] = []
        history = tuple(
            priced.Order(at=row[10], quantity=row[11], unit_monthly=row[8], ref=row[12])
            for row in sub_rows
        )
        for row in sub_rows:
            at: datetime = row[10]
            if at < begin:
                start = row[11]
            else:
                changes.append(pricing.Change(at=at, quantity=row[11]))
        if start == 0 and not changes and (first[2], first[5]) not in held:
            continue
        result[first[0]].append(
            SubscriptionMonth(
                project_id=first[2],
                project_label=f"{first[3]}/{first[4]}",
                product_id=first[5],
                product_name=first[6],
                device_class=first[7],
                unit_monthly_price=sub_rows[-1][8],
                currency=sub_rows[-1][9],
                start_quantity=start,
                changes=tuple(changes),
                orders=history,
            )
        )
    return result


def _held_pairs(organization_ids: list[int] | None, begin: datetime, end: datetime) -> set:
    """(project id, product id) of every ledger claim overlapping [begin, end)."""
    from portal.cluster.models import UsageRecord

    records = UsageRecord.objects.filter(allocated_at__lt=end).filter(
        Q(released_at__isnull=True) | Q(released_at__gt=begin)
    )
    if organization_ids is not None:
        records = records.filter(organization_id__in=organization_ids)
    return set(records.values_list("project_id", "product_id").distinct())


def current_quantity(sub: SubscriptionMonth) -> int:
    return sub.changes[-1].quantity if sub.changes else sub.start_quantity


def grace_seconds() -> int:
    """How long slices beyond a decreased quantity run unbilled (one setting: the controller's
    cancel grace, TRANCHE_CANCEL_GRACE_SECONDS, at most a day)."""
    return int(settings.CONTROLLER_CANCEL_GRACE_SECONDS)


def usage_intervals(
    project_ids: list[int], year: int, month: int
) -> dict[tuple[int, int], list[tuple[datetime, datetime | None]]]:
    """Per (project id, product id), the ledger's claim lifetimes overlapping the month."""
    from portal.cluster.models import UsageRecord

    begin, end = pricing.month_start(year, month), pricing.month_end(year, month)
    records = UsageRecord.objects.filter(allocated_at__lt=end).filter(
        Q(released_at__isnull=True) | Q(released_at__gt=begin)
    )
    records = records.filter(project_id__in=project_ids)
    found: dict[tuple[int, int], list] = defaultdict(list)
    for project, product, a, b in records.values_list(
        "project_id", "product_id", "allocated_at", "released_at"
    ):
        found[(project, product)].append((a, b))
    return found


def overage_amount(sub: SubscriptionMonth, slice_hours: int, year: int, month: int) -> Decimal:
    """What `slice_hours` beyond the entitlement cost, at the latest order's unit price spread
    over the month's hours (what an hour of one slice costs under the plan)."""
    return priced.amount(
        sub.unit_monthly_price, 1, slice_hours, pricing.hours_in_month(year, month)
    )


@dataclass(frozen=True)
class SubscriptionBill:
    """What one subscription bills in a month up to an instant: its priced lines (one per order
    and price) and the slice-hours held past a decrease's grace period (the overage line)."""

    sub: SubscriptionMonth
    lines: tuple[priced.Line, ...]
    overage_hours: int
    overage: Decimal
    credits: tuple = ()  # SLA credits of its slices' outages (`billing.sla.Credit`)

    @property
    def net(self) -> Decimal:
        return money.total(
            [*(line.amount for line in self.lines), self.overage, *(c.amount for c in self.credits)]
        )


def month_bills(
    subs: list[SubscriptionMonth], year: int, month: int, until: datetime
) -> list[SubscriptionBill]:
    """Every subscription's bill of the month as it stands at `until` (the month's end for its
    invoice, the instant of a quote or a page). The invoice, the quotes' tax and the billing
    page all read this one function, so every price shown is computed over the lines charged."""
    usage = usage_intervals(list({sub.project_id for sub in subs}), year, month)
    bills = []
    for sub in subs:
        extra = priced.overage_slice_hours(
            sub.orders,
            usage.get((sub.project_id, sub.product_id), []),
            grace_seconds(),
            year=year,
            month=month,
            until=min(until, pricing.month_end(year, month)),
        )
        bills.append(
            SubscriptionBill(
                sub=sub,
                lines=tuple(sub.lines(year, month)),
                overage_hours=extra,
                overage=overage_amount(sub, extra, year, month) if extra else money.ZERO,
            )
        )
    charged = {(b.sub.project_id, b.sub.product_id): b.net for b in bills}
    credits = sla.month_credits(subs, year, month, until, charged)
    return [
        replace(b, credits=tuple(credits.get((b.sub.project_id, b.sub.product_id), ())))
        for b in bills
    ]


def month_net(organization_id: int, year: int, month: int, until: datetime) -> Decimal:
    """The net of the organization's invoice of the month as it stands at `until`: every priced
    line and the overage so far (what its invoice would bill if nothing more happened)."""
    subs = subscription_months([organization_id], year, month).get(organization_id, [])
    return money.total(bill.net for bill in month_bills(subs, year, month, until))
