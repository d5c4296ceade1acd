"""Reads of orders, subscriptions and usage, scoped to a project the caller already reached
through `tenants.selectors.get_project` (so another organization's rows are never visible)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Count, Q, QuerySet
from django.http import Http404
from django.utils import timezone

from portal.catalog.models import Product
from portal.orders.models import MAX_SLICES_PER_PRODUCT, Order, ProjectUsage, Subscription
from portal.tenants.errors import ServiceError
from portal.tenants.models import Project
from tranche import money
from tranche import pricing as billing_pricing
from tranche.orders import OPEN_ORDER_STATES


@dataclass(frozen=True)
class Quote:
    """What an order would do and cost; shown on the confirmation page, stored on the order.

    `prorata_charge` is what the order adds to this month's invoice (negative: a credit), priced
    by `tranche.pricing` to the hour, as the invoice will bill it."""

    kind: str
    from_quantity: int
    quantity: int
    unit_monthly_price: Decimal
    monthly_total: Decimal
    prorata_charge: Decimal
    currency: str
    billed_hours: int
    hours_in_month: int

    @property
    def is_credit(self) -> bool:
        return self.prorata_charge < 0

    @property
    def credit(self) -> Decimal:
        return -self.prorata_charge

    subscription_version: int = 0


@dataclass(frozen=True)
class QuotaLine:
    """One product on the quota page."""

    product: Product
    entitled: int
    allocated: int | None
    pending: int | None
    pending_reason: str  # one line per waiting pod: "pod: why"
    open_orders: int
    reported_at: object
    not_ready_message: str = ""

    @property
    def pending_reasons(self) -> list[str]:
        return [line for line in self.pending_reason.splitlines() if line.strip()]


def current_quantity(project: Project, product: Product) -> int:
    """The project's entitled quantity of `product` (0 when never bought)."""
    sub = Subscription.objects.filter(project=project, product=product).first()
    return sub.quantity if sub else 0


def quote_order(
    project: Project, product: Product, quantity: int, now: datetime | None = None
) -> Quote:
    """Validate the target `quantity` and price it; raises `ServiceError` with the reason."""
    if not 0 <= quantity <= MAX_SLICES_PER_PRODUCT:
        raise ServiceError(
            f"Quantity must be between 0 and {MAX_SLICES_PER_PRODUCT} slices per product "
            f"(you asked for {quantity}). Choose a number in that range."
        )
    sub = Subscription.objects.filter(project=project, product=product).first()
    current, version = (sub.quantity, sub.version) if sub else (0, 0)
    if quantity == current:
        raise ServiceError(
            f"The project already holds {current} x {product.name}; nothing would change. "
            "Choose a different quantity."
        )
    if current == 0:
        kind = Order.Kind.BUY
        if not product.sellable:
            raise ServiceError(f"{product.name} is no longer sold. Choose another product.")
    elif quantity == 0:
        kind = Order.Kind.CANCEL
    else:
        kind = Order.Kind.RESIZE
        if quantity > current and not product.sellable:
            raise ServiceError(
                f"{product.name} is no longer sold, so it cannot grow. You can shrink or cancel."
            )
    now = now or timezone.now()
    year, month = billing_pricing.month_of(now)
    hours = billing_pricing.hours_in_month(year, month)
    hour = billing_pricing.hour_index(now, year, month)
    return Quote(
        kind=kind,
        from_quantity=current,
        quantity=quantity,
        unit_monthly_price=product.monthly_price,
        monthly_total=money.round_cents(product.monthly_price * quantity),
        prorata_charge=billing_pricing.change_amount(product.monthly_price, current, quantity, now),
        currency=product.currency,
        billed_hours=hours - hour if quantity > current else hours - hour - 1,
        hours_in_month=hours,
        subscription_version=version,
    )


def orders_of(project: Project) -> QuerySet[Order]:
    """The project's orders, newest first."""
    return Order.objects.filter(project=project).select_related("product", "placed_by")


def get_order(project: Project, order_id: int) -> Order:
    """One order of the project, or 404."""
    order = orders_of(project).filter(pk=order_id).first()
    if order is None:
        raise Http404("No such order.")
    return order


def subscriptions_of(project: Project) -> QuerySet[Subscription]:
    """The project's subscriptions that hold slices."""
    return Subscription.objects.filter(project=project, quantity__gt=0).select_related("product")


def _not_ready_message(sub: Subscription | None) -> str:
    """Why the controller has not (yet) made this entitlement real, if it said so."""
    for cond in (sub.conditions or []) if sub else []:
        if cond.get("type") == "Ready" and cond.get("status") != "True":
            return str(cond.get("message", ""))
    return ""


def quota_lines(project: Project) -> list[QuotaLine]:
    """Entitled, allocated and pending slices per product. Usage is None (not yet reported)
    only until the watcher has seen the project's namespace (`Project.usage_reported_at`):
    after that a product without claims has 0 in use and 0 pending."""
    open_orders = Count("orders", filter=Q(orders__state__in=OPEN_ORDER_STATES))
    subs = {
        s.product_id: s
        for s in Subscription.objects.filter(project=project).annotate(open_orders=open_orders)
    }  # every order belongs to its product's subscription: one query for both
    usage = {u.product_id: u for u in ProjectUsage.objects.filter(project=project)}
    seen = 0 if project.usage_reported_at is not None else None
    lines = []
    product_ids = set(subs) | set(usage)
    for product in Product.objects.filter(pk__in=product_ids).select_related("gpu_model"):
        sub, use = subs.get(product.pk), usage.get(product.pk)
        open_count = sub.open_orders if sub else 0
        if (sub is None or sub.quantity == 0) and use is None and not open_count:
            continue
        lines.append(
            QuotaLine(
                product=product,
                entitled=sub.quantity if sub else 0,
                allocated=use.allocated if use else seen,
                pending=use.pending if use else seen,
                pending_reason=use.pending_reason if use else "",
                open_orders=open_count,
                reported_at=use.updated_at if use else project.usage_reported_at,
                not_ready_message=_not_ready_message(sub),
            )
        )
    return lines
