"""Turn an organization's order history into the month's priced lines (reads only).

The entitlement timeline of a subscription is its orders: each order set the subscription's
quantity when it was placed (`created_at`), whatever became of its provisioning, so the quantity
held at an instant is the target of the last order placed before it. Each order's slices are
priced at the unit price that order was confirmed at (`tranche.priced`): a later price change
never re-prices them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from portal.orders.models import Order
from tranche import priced, pricing


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
    """Per organization id, its subscriptions that held anything in the month (one query)."""
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
        if start == 0 and not changes:
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


def current_quantity(sub: SubscriptionMonth) -> int:
    return sub.changes[-1].quantity if sub.changes else sub.start_quantity
