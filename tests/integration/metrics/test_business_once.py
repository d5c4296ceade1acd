"""The database's figures are counted once, whatever the number of portal replicas (issue #46):
two portals of two processes each (the chart's 2 replicas) are scraped by a real Prometheus as
the chart scrapes them, `/metrics` per pod (job tranche-portal) and `/metrics/business` once
through the Service (job tranche-business, here one of the two portals: any process answers
the same). The dashboard's `sum()` of sold slices and orders is then the database's count, and
the price per slice-hour is the catalogue's unrounded."""

from __future__ import annotations

import secrets
from decimal import Decimal

import pytest
from django.db import connection
from django.utils import timezone

from portal.catalog.models import Product
from portal.orders.models import Order, Subscription
from portal.orders.services import place_order
from tests.helpers.portal import serve_portal
from tests.helpers.prometheus import run_prometheus
from tests.helpers.wait import wait_for
from tranche import pricing

pytestmark = pytest.mark.django_db(transaction=True)
V8, V16 = "tranche-v100-8g", "tranche-v100-16g"


def _held(product: Product) -> int:
    """The database's count: what the product's subscriptions hold."""
    return sum(Subscription.objects.filter(product=product).values_list("quantity", flat=True))


def test_two_portals_serve_the_figures_once(world, tmp_path):
    now = timezone.now()
    owner, other = world.membership(world.owner), world.membership(world.outsider)
    v8, v16 = world.products[V8], world.products[V16]
    Product.objects.filter(pk=v8.pk).update(monthly_price=Decimal("87.12"))  # 0.121/h at 720 h
    for membership, project, product, quantity in (
        (owner, world.project_a, v8, 2),
        (owner, world.project_a, v16, 3),
        (other, world.project_b, v8, 4),
    ):
        place_order(membership=membership, project=project, product=product, quantity=quantity,
                    idempotency_key=secrets.token_hex(8), now=now)  # fmt: skip
    sold = {p.device_class: float(_held(p)) for p in Product.objects.all()}
    assert (sold[V8], sold[V16]) == (6, 3)
    orders = Order.objects.count()
    db = connection.settings_dict["NAME"]
    with serve_portal(db) as one, serve_portal(db) as two:
        pods = [p.http_base.removeprefix("http://") for p in (one, two)]
        targets = {
            "tranche-portal": (pods, "/metrics"),  # per pod, as the PodMonitor
            "tranche-business": (pods[0], "/metrics/business"),  # once, as the Service
        }
        with run_prometheus(tmp_path / "prom", targets, []) as prom:
            wait_for(
                lambda: prom.query('count(up{job="tranche-portal"} == 1) == 2'), 60,
                lambda: f"both portals scraped: {prom.targets_up()}",
            )  # fmt: skip
            wait_for(lambda: prom.query("tranche_orders"), 30, "the business figures scraped")
            got = prom.values("sum by (product) (tranche_product_slices_sold)", "product")
            assert got == sold, got
            assert prom.values("sum(tranche_orders)", "") == {"": float(orders)}
            # /metrics of either portal no longer carries the database's figures
            assert not prom.query('tranche_product_slices_sold{job="tranche-portal"}')
            assert prom.query('up{job="tranche-business"} == 1')
            assert prom.values('count(tranche_ready{job="tranche-portal"}) >= 2', "")
            price = prom.values(
                f'tranche_product_price_per_slice_hour{{product="{V8}"}}', "product"
            )
            hours = pricing.hours_in_month(*pricing.month_of(now))
            assert price[V8] == float(Decimal("87.12") / hours)
