"""Place orders: the one write path that changes a subscription (the entitlement).

`place_order` runs in one transaction: it locks the organization row (fresh suspension status,
one order at a time per organization), dedups on the idempotency key (same key + same request →
the existing order, created=False), bumps the subscription with a compare-and-swap on its
version, records the order, its first history entry and an audit row, and asks the controller to
reconcile the project after commit. On any refusal nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db import transaction

from portal.audit.services import record_audit
from portal.catalog.models import Product
from portal.core import figures
from portal.core.queue import enqueue_reconcile
from portal.orders.models import Order, OrderEvent, Subscription
from portal.orders.selectors import quote_order
from portal.tenants.errors import (
    ConflictError,
    NotAllowedError,
    OrganizationSuspendedError,
    ServiceError,
)
from portal.tenants.models import Membership, Organization, Project

KEY_MAX = 64
ANOTHER_ORDER_CAME_FIRST = (
    "The subscription changed while you were ordering (another order came first). "
    "Reload the page to see the new quantity and confirm again."
)


@dataclass(frozen=True)
class ConfirmedQuote:
    """What the tenant saw and confirmed: the order is placed only if it is still true."""

    from_quantity: int
    subscription_version: int
    prorata_charge: Decimal
    prorata_tax: Decimal | None = None  # None: a form from before tax was shown (net only)


def suspension_message(organization: Organization) -> str:
    """What a tenant of a suspended organization reads when ordering."""
    reason = organization.suspension_reason or "no reason was recorded"
    return (
        f"Your organization {organization.name} is suspended ({reason}), so new orders, resizes "
        "and cancellations are refused. Running slices are not changed. Contact billing support "
        "to resume the account, then order again."
    )


@transaction.atomic
def place_order(
    *,
    membership: Membership,
    project: Project,
    product: Product,
    quantity: int,
    idempotency_key: str,
    confirmed: ConfirmedQuote | None = None,
    now: datetime | None = None,
) -> tuple[Order, bool]:
    """Buy, resize or cancel (target `quantity`, 0 = cancel). Returns (order, created).

    With `confirmed` (the confirmation page's quote), the order is refused with a
    `ConflictError` unless the subscription is still at the confirmed quantity and version and
    the charge is still the confirmed amount: a tenant is never charged for a change they did
    not see. The order is placed at the instant its quote was priced (`now`, default the clock),
    so quote and invoice bill the same hour."""
    if project.organization_id != membership.organization_id:
        raise ServiceError("This project does not belong to your organization.")
    if not membership.can_order:
        raise NotAllowedError(
            "Viewers cannot place orders. Ask an owner of the organization for the member role."
        )
    key = (idempotency_key or "").strip()
    if not key or len(key) > KEY_MAX:
        raise ServiceError(
            "The order form is missing its one-time key or it is malformed. "
            "Reload the order page and confirm again."
        )
    organization = Organization.objects.select_for_update().get(pk=membership.organization_id)
    existing = Order.objects.filter(organization=organization, idempotency_key=key).first()
    if existing is not None:
        if (existing.project_id, existing.product_id, existing.quantity) != (
            project.pk,
            product.pk,
            quantity,
        ):
            raise ServiceError(
                "This confirmation was already used for a different order. "
                "Reload the order page to get a fresh confirmation."
            )
        return existing, False
    if organization.is_suspended:
        raise OrganizationSuspendedError(suspension_message(organization))

    sub, _ = Subscription.objects.get_or_create(project=project, product=product)
    quote = quote_order(project, product, quantity, now=now)
    if confirmed is not None:
        if (confirmed.from_quantity, confirmed.subscription_version) != (
            quote.from_quantity,
            sub.version,
        ):
            raise ConflictError(ANOTHER_ORDER_CAME_FIRST)
        if confirmed.prorata_charge != quote.prorata_charge or (
            confirmed.prorata_tax is not None and confirmed.prorata_tax != quote.prorata_tax
        ):
            confirmed_gross = confirmed.prorata_charge + (confirmed.prorata_tax or 0)
            raise ConflictError(
                f"The price changed since you confirmed ({confirmed_gross} → "
                f"{quote.prorata_gross} {quote.currency} including tax now). Nothing was "
                "ordered. Reload the page and confirm the new price."
            )
    swapped = Subscription.objects.filter(
        pk=sub.pk, version=sub.version, quantity=quote.from_quantity
    ).update(quantity=quantity, version=sub.version + 1)
    if not swapped:
        raise ConflictError(ANOTHER_ORDER_CAME_FIRST)
    figures.changed(project.pk)
    order = Order.objects.create(
        organization=organization,
        project=project,
        product=product,
        subscription=sub,
        kind=quote.kind,
        from_quantity=quote.from_quantity,
        quantity=quantity,
        idempotency_key=key,
        unit_monthly_price=quote.unit_monthly_price,
        monthly_total=quote.monthly_total,
        prorata_charge=quote.prorata_charge,
        prorata_tax=quote.prorata_tax,
        tax_rate_percent=quote.tax_rate_percent,
        currency=quote.currency,
        placed_by=membership.user,
        created_at=quote.at,
    )
    OrderEvent.objects.create(
        order=order,
        to_state=order.state,
        actor_label=membership.user.get_username(),
        message=f"{quote.kind} {quote.from_quantity} → {quantity}",
    )
    record_audit(
        actor=membership.user,
        action=f"order.{quote.kind}",
        obj=order,
        organization_id=organization.pk,
        before={"subscription": sub.pk, "quantity": quote.from_quantity},
        after={
            "subscription": sub.pk,
            "quantity": quantity,
            "prorata_charge": str(quote.prorata_charge),
            "prorata_tax": str(quote.prorata_tax),
            "monthly_total": str(quote.monthly_total),
            "currency": quote.currency,
        },
    )
    enqueue_reconcile(project.pk)
    return order, True
