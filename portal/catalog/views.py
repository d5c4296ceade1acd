"""The catalogue page: what is for sale (the per-project manifest pages are
`portal.orders.manifest_views`, since they show what the project holds)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from portal.catalog.selectors import sellable_products
from portal.tenants.context import nav_context


@login_required
def catalogue(request: HttpRequest) -> HttpResponse:
    """Sellable products with price, memory, compute share and the GPU they run on."""
    context = {"products": sellable_products(), **nav_context(request)}
    return render(request, "catalog/catalogue.html", context)
