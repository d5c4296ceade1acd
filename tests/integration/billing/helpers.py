"""Orders placed at chosen instants (the entitlement timeline billing reads)."""

from __future__ import annotations

import secrets
from datetime import datetime

from portal.orders.models import Order
from portal.orders.services import place_order


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
