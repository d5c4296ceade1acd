"""CSV exports of subscriptions and orders for billing staff (admin actions)."""

from __future__ import annotations

import csv
from collections.abc import Iterable

from django.http import HttpResponse

from portal.orders.models import Order, Subscription

SUBSCRIPTION_COLUMNS = [
    "id",
    "organization",
    "project",
    "namespace",
    "device_class",
    "quantity",
    "unit_monthly_price",
    "monthly_total",
    "currency",
    "updated_at",
]
ORDER_COLUMNS = [
    "id",
    "organization",
    "project",
    "device_class",
    "kind",
    "from_quantity",
    "quantity",
    "state",
    "failure_reason",
    "monthly_total",
    "prorata_charge",
    "currency",
    "placed_by",
    "created_at",
]


def _cell(value: object) -> str:
    """Neutralise spreadsheet formulas in user-controlled text (CSV injection)."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def subscription_rows(subs: Iterable[Subscription]) -> Iterable[list[str]]:
    """One row per subscription."""
    for s in subs:
        price = s.product.monthly_price
        yield [
            _cell(v)
            for v in (
                s.pk,
                s.project.organization.slug,
                s.project.slug,
                s.project.namespace,
                s.product.device_class,
                s.quantity,
                price,
                price * s.quantity,
                s.product.currency,
                s.updated_at.isoformat(),
            )
        ]


def order_rows(orders: Iterable[Order]) -> Iterable[list[str]]:
    """One row per order."""
    for o in orders:
        yield [
            _cell(v)
            for v in (
                o.pk,
                o.organization.slug,
                o.project.slug,
                o.product.device_class,
                o.kind,
                o.from_quantity,
                o.quantity,
                o.state,
                o.failure_reason,
                o.monthly_total,
                o.prorata_charge,
                o.currency,
                o.placed_by.get_username() if o.placed_by else "",
                o.created_at.isoformat(),
            )
        ]


def csv_response(filename: str, header: list[str], rows: Iterable[list[str]]) -> HttpResponse:
    """A downloadable CSV file."""
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    writer = csv.writer(response)
    writer.writerow(header)
    writer.writerows(rows)
    return response


def export_subscriptions(queryset) -> HttpResponse:
    """CSV of the given subscriptions."""
    qs = queryset.select_related("project__organization", "product").order_by("pk")
    return csv_response("subscriptions.csv", SUBSCRIPTION_COLUMNS, subscription_rows(qs))


def export_orders(queryset) -> HttpResponse:
    """CSV of the given orders."""
    qs = queryset.select_related("organization", "project", "product", "placed_by").order_by("pk")
    return csv_response("orders.csv", ORDER_COLUMNS, order_rows(qs))
