"""Reads of the catalogue (public data: every logged-in tenant sees the sellable products)."""

from __future__ import annotations

from django.db.models import QuerySet

from portal.catalog.models import Product


def sellable_products() -> QuerySet[Product]:
    """Products a tenant can buy now."""
    return Product.objects.filter(sellable=True).select_related("gpu_model")


def find_product(product_id: int) -> Product | None:
    """Any product by id (resize/cancel still work on a product no longer sold), or None."""
    return Product.objects.select_related("gpu_model").filter(pk=product_id).first()
