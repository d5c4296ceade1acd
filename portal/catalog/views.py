"""The catalogue page: what is for sale (the per-project manifest pages are
`portal.orders.manifest_views`, since they show what the project holds)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from portal.catalog.selectors import sellable_products
from portal.catalog.taxes import gross, tax_rate
from portal.tenants.context import nav_context
from tranche import money, pricing


@login_required
def catalogue(request: HttpRequest) -> HttpResponse:
    """Sellable products with price, memory, compute share and the GPU they run on; the per-hour
        figure is the monthly price spread over this month's hours (how pro-rating bills it). Prices
    are shown with and without tax, at the tax rate of the current project's billing account."""
    now = timezone.now()
    hours = pricing.hours_in_month(*pricing.month_of(now))
    nav = nav_context(request)
    project = nav.get("nav_project")
    rate = tax_rate(project.organization if project else None)
    products = list(sellable_products())
    for product in products:
        product.rate_this_month = money.round_rate(product.monthly_price / hours)
        product.monthly_gross = gross(product.monthly_price, rate)
        product.rate_this_month_gross = money.round_rate(
            product.monthly_price * (100 + rate) / 100 / hours
        )
    context = {"products": products, "hours_this_month": hours, "tax_rate": rate, **nav}
    return render(request, "catalog/catalogue.html", context)
