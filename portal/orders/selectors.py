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
from portal.catalog.taxes import gross, tax_terms
from portal.cluster.models import ProjectUsage, QuotaUse
from portal.core import figures
from portal.orders.models import MAX_SLICES_PER_PRODUCT, Order, Subscription
from portal.tenants.errors import ServiceError
from portal.tenants.models import Project
from tranche import money, priced
from tranche import pricing as billing_pricing
from tranche.orders import OPEN_ORDER_STATES

QUOTA_LINES = "quota_lines"  # its name among the project's figures (`portal.core.figures`)


@dataclass(frozen=True)
class Quote:
    """What an order would do and cost; shown on the confirmation page, stored on the order.

    `prorata_charge` is what the order adds to this month's invoice (negative: a credit), priced
    by `tranche.priced` to the hour given the hour's history, as the invoice will bill it;
    `prorata_tax` is what it adds to the invoice's tax (the tax of the month's net after the
    order less the tax before it), so the confirmed gross is what the invoice total grows by.
    `at` is the instant it was priced at: the order is placed with that time."""

    kind: str
    from_quantity: int
    quantity: int
    unit_monthly_price: Decimal
    monthly_total: Decimal
    prorata_charge: Decimal
    currency: str
    billed_hours: int
    hours_in_month: int
    tax_rate_percent: Decimal = Decimal("0")
    prorata_tax: Decimal = Decimal("0.00")
    at: datetime | None = None

    @property
    def is_credit(self) -> bool:
        return self.prorata_charge < 0

    @property
    def credit(self) -> Decimal:
        return -self.prorata_charge

    @property
    def prorata_gross(self) -> Decimal:
        return self.prorata_charge + self.prorata_tax

    @property
    def credit_gross(self) -> Decimal:
        return -self.prorata_gross

    @property
    def monthly_total_gross(self) -> Decimal:
        return gross(self.monthly_total, self.tax_rate_percent)

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


def price_history(subscription: Subscription | None) -> list[priced.Order]:
    """The subscription's orders as priced history (time order): what its invoice lines bill."""
    if subscription is None:
        return []
    rows = Order.objects.filter(subscription=subscription).order_by("created_at", "id")
    return [
        priced.Order(at=at, quantity=q, unit_monthly=unit, ref=pk)
        for at, q, unit, pk in rows.values_list(
            "created_at", "quantity", "unit_monthly_price", "pk"
        )
    ]


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
    history = [o for o in price_history(sub) if o.at <= now]
    lines = priced.order_lines(
        history, priced.Order(at=now, quantity=quantity, unit_monthly=product.monthly_price)
    )
    charge = sum((line.amount for line in lines), Decimal("0.00"))
    terms = tax_terms(project.organization, now)
    tax = money.tax_added(terms.month_net, charge, terms.rate_percent)
    return Quote(
        kind=kind,
        from_quantity=current,
        quantity=quantity,
        unit_monthly_price=product.monthly_price,
        monthly_total=money.round_cents(product.monthly_price * quantity),
        prorata_charge=charge,
        currency=product.currency,
        billed_hours=max((line.hours for line in lines), default=0),
        hours_in_month=hours,
        subscription_version=version,
        tax_rate_percent=terms.rate_percent,
        prorata_tax=tax,
        at=now,
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


def quota_lines(project: Project, quota_use: QuotaUse | None) -> list[QuotaLine]:
    """Entitled, allocated and pending slices per product. Usage is None (not yet reported)
    only until the watcher has seen the project's namespace (`quota_use`, its quota's status,
    exists): after that a product without claims has 0 in use and 0 pending. Kept per project
    until a writer says it changed (`portal.core.figures`)."""
    return figures.cached(project, QUOTA_LINES, lambda: compute_quota_lines(project, quota_use))


def compute_quota_lines(project: Project, quota_use: QuotaUse | None) -> list[QuotaLine]:
    """`quota_lines` read from the database (uncached)."""
    open_orders = Count("orders", filter=Q(orders__state__in=OPEN_ORDER_STATES))
    subs = {
        s.product_id: s
        for s in Subscription.objects.filter(project=project)
        .annotate(open_orders=open_orders)
        .select_related("product__gpu_model")
    }  # every order belongs to its product's subscription: one query for both
    usage = {
        u.product_id: u
        for u in ProjectUsage.objects.filter(project=project).select_related("product__gpu_model")
    }
    reported_at = quota_use.updated_at if quota_use else None
    seen = 0 if quota_use is not None else None
    products = {pk: sub.product for pk, sub in subs.items()}
    products.update({pk: use.product for pk, use in usage.items()})
    lines = []
    for product in sorted(products.values(), key=lambda p: (p.gpu_model.name, p.memory_mib)):
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
                reported_at=use.updated_at if use else reported_at,
                not_ready_message=_not_ready_message(sub),
            )
        )
    return lines
