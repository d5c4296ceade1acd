"""Orders placed at chosen instants (the entitlement timeline billing reads)."""

from __future__ import annotations

import secrets
from datetime import datetime

from portal.orders.models import Order
from portal.orders.services import place_order
from tranche import pricing


def place_at(membership, project, product, quantity: int, at: datetime) -> Order:
    """Place an order through the service as if confirmed at `at`: priced and dated then (orders
    are billed by placement, at the price and tax their quote had)."""
    order, _ = place_order(
        membership=membership,
        project=project,
        product=product,
        quantity=quantity,
        idempotency_key=secrets.token_hex(8),
        now=at,
    )
    return Order.objects.get(pk=order.pk)


def same_length_ended_month(year: int, month: int) -> tuple[int, int]:
    """The latest ended month with as many hours as (year, month): an hour of the one is the
    same hour of the other, priced alike (an order confirmed now is invoiced there)."""
    hours, (y, m) = pricing.hours_in_month(year, month), (year, month)
    for _ in range(60):
        y, m = (y - 1, 12) if m == 1 else (y, m - 1)
        if pricing.hours_in_month(y, m) == hours:
            return y, m
    raise AssertionError("no month of the same length in five years")
