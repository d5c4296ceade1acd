"""Order pages: choose, confirm (price and pro-rata), place; order list/detail. The quota page
is `portal.status.quota_views` (it also reads what the cluster says)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from portal.catalog.selectors import sellable_products
from portal.catalog.taxes import gross, tax_rate
from portal.core import queue
from portal.orders import selectors
from portal.orders.backlog import delay_notice
from portal.orders.forms import ConfirmOrderForm, OrderForm
from portal.orders.services import ConfirmedQuote, place_order, suspension_message
from portal.tenants.context import nav_context, request_project
from portal.tenants.errors import ServiceError

VIEWER_MESSAGE = (
    "Viewers cannot place orders. Ask an owner of the organization for the member role."
)


def _form_page(request, project, membership, form, *, status=200, error=""):
    rate = tax_rate(project.organization)
    products = list(sellable_products())
    for product in products:
        product.monthly_gross = gross(product.monthly_price, rate)
    context = {
        "project": project,
        "membership": membership,
        "form": form,
        "products": products,
        "tax_rate": rate,
        "subscriptions": selectors.subscriptions_of(project),
        "error": error,
        **nav_context(request, project),
    }
    return render(request, "orders/order_form.html", context, status=status)


def _blocker(membership) -> tuple[str, int] | None:
    if not membership.can_order:
        return VIEWER_MESSAGE, 403
    if membership.organization.is_suspended:
        return suspension_message(membership.organization), 403
    return None


@login_required
def order_form(request: HttpRequest, project_id: int) -> HttpResponse:
    """Step 1: choose a product and the target quantity."""
    project, membership = request_project(request, project_id)
    initial = {k: v for k, v in request.GET.items() if k in ("product", "quantity") and len(v) < 20}
    blocked = _blocker(membership)
    form = OrderForm(initial=initial)
    if blocked:
        return _form_page(request, project, membership, form, status=blocked[1], error=blocked[0])
    return _form_page(request, project, membership, form)


@login_required
def order_confirm(request: HttpRequest, project_id: int) -> HttpResponse:
    """Step 2 (GET): show what changes and what it costs. Step 3 (POST): place the order."""
    project, membership = request_project(request, project_id)
    blocked = _blocker(membership)
    data = request.POST if request.method == "POST" else request.GET
    form = (ConfirmOrderForm if request.method == "POST" else OrderForm)(data)
    if blocked:
        return _form_page(request, project, membership, form, status=blocked[1], error=blocked[0])
    if not form.is_valid():
        return _form_page(request, project, membership, form, status=400)
    product, quantity = form.cleaned_data["product"], form.cleaned_data["quantity"]
    try:
        if request.method == "POST":
            order, created = place_order(
                membership=membership,
                project=project,
                product=product,
                quantity=quantity,
                idempotency_key=form.cleaned_data["idempotency_key"],
                confirmed=ConfirmedQuote(
                    from_quantity=form.cleaned_data["confirmed_from"],
                    subscription_version=form.cleaned_data["confirmed_version"],
                    prorata_charge=form.cleaned_data["confirmed_charge"],
                    prorata_tax=form.cleaned_data.get("confirmed_tax"),
                ),
            )
            if created and queue.last_send_failed():
                messages.warning(
                    request,
                    f"Order #{order.pk} placed and queued; the provisioning queue is unreachable "
                    "right now, so it will be provisioned when the queue is back (usually within "
                    "minutes). There is no need to order again.",
                )
            elif created:
                messages.success(request, f"Order #{order.pk} placed; provisioning starts now.")
            else:
                messages.info(request, f"Order #{order.pk} was already placed; not ordered twice.")
            return redirect("order_detail", project_id=project.pk, order_id=order.pk)
        quote = selectors.quote_order(project, product, quantity)
    except ServiceError as error:
        return _form_page(request, project, membership, form, status=error.status, error=str(error))
    context = {
        "project": project,
        "product": product,
        "quote": quote,
        "grace_minutes": settings.CONTROLLER_CANCEL_GRACE_SECONDS // 60,
        "idempotency_key": uuid.uuid4().hex,
        **nav_context(request, project),
    }
    return render(request, "orders/order_confirm.html", context)


@login_required
def order_list(request: HttpRequest, project_id: int) -> HttpResponse:
    """The project's orders."""
    project, _ = request_project(request, project_id)
    context = {
        "project": project,
        "orders": selectors.orders_of(project)[:200],
        **nav_context(request, project),
    }
    return render(request, "orders/order_list.html", context)


@login_required
def order_detail(request: HttpRequest, project_id: int, order_id: int) -> HttpResponse:
    """One order: state, conditions, history, money."""
    project, _ = request_project(request, project_id)
    order = selectors.get_order(project, order_id)
    context = {
        "project": project,
        "order": order,
        "events": order.events.all(),
        "delay_notice": delay_notice(order),
        **nav_context(request, project),
    }
    return render(request, "orders/order_detail.html", context)
