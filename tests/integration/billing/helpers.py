"""Orders placed and claims held at chosen instants (the entitlement timeline and the ledger
billing reads)."""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

from portal.cluster.models import UsageRecord
from portal.orders.models import Order
from portal.orders.services import place_order
from tranche import pricing

MINUTE = timedelta(minutes=1)


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


def held_claim(
    project, product, uid: str, allocated_at: datetime, released_at: datetime | None, *, name=""
) -> UsageRecord:
    """The ledger's record of one claim of `product` in `project`, as the watcher's events
    write it (times from the cluster)."""
    return UsageRecord.objects.create(
        claim_uid=uid,
        claim_name=name or uid,
        organization=project.organization,
        project=project,
        product=product,
        allocated_at=allocated_at,
        released_at=released_at,
        opened_by="event",
    )


def cancelled_but_held(
    world, product, bought: datetime, cancelled: datetime, released: datetime
) -> Order:
    """One slice of `product` bought at `bought` and cancelled at `cancelled` in project A, its
    claim (allocated 5 minutes after the buy) released only at `released`; the cancel order."""
    m = world.membership(world.owner)
    place_at(m, world.project_a, product, 1, bought)
    cancel = place_at(m, world.project_a, product, 0, cancelled)
    held_claim(world.project_a, product, f"uid-{released:%m%d%H%M}", bought + 5 * MINUTE, released)
    return cancel


def same_length_ended_month(year: int, month: int) -> tuple[int, int]:
    """The latest ended month with as many hours as (year, month): an hour of the one is the
    same hour of the other, priced alike (an order confirmed now is invoiced there)."""
    hours, (y, m) = pricing.hours_in_month(year, month), (year, month)
    for _ in range(60):
        y, m = (y - 1, 12) if m == 1 else (y, m - 1)
        if pricing.hours_in_month(y, m) == hours:
            return y, m
    raise AssertionError("no month of the same length in five years")
