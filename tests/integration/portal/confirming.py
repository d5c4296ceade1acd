"""Test helper: the hidden fields a tenant's confirmation page carries for an order."""

from __future__ import annotations

from django.urls import reverse


def confirmed_order(client, project, product, quantity: int, key: str) -> dict:
    """GET the confirmation page like a browser and return the form it would post."""
    url = reverse("order_confirm", args=[project.pk])
    quote = client.get(url, {"product": product.pk, "quantity": quantity}).context["quote"]
    return {
        "product": product.pk,
        "quantity": quantity,
        "idempotency_key": key,
        "confirmed_from": quote.from_quantity,
        "confirmed_version": quote.subscription_version,
        "confirmed_charge": str(quote.prorata_charge),
    }
