"""The business as operators see it: the portal's `/metrics/business` (`portal/metrics.py`),
scraped once through the portal's Service, never per pod, so each figure is counted once.

Rendered fresh per scrape from the database (nothing lingers from an earlier answer, and every
portal process answers the same): orders by state, slices sold (held by subscriptions) against
allocated (the watcher's claim counts) per product, each product's price per slice-hour and the
revenue run-rate per product. The run-rate is the same pricing code the month-to-date page and
the invoices use (`portal.billing.charges` subscriptions, `tranche.priced.held_at` unit prices:
the slices held now, each at the price its order was confirmed at, over the month's hours), so
what the dashboard says per hour is what the invoice charges. Money is exported as a float only
here, for PromQL; the `currency` label says which. The `product` label is the product's
DeviceClass name (a validated slug), never its display name.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from decimal import Decimal

from django.db.models import Count, Sum
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from portal.billing import charges
from portal.catalog.models import Product
from portal.cluster.models import ProjectUsage
from portal.orders.models import Order
from tranche import priced, pricing


class BusinessCollector(Collector):
    def collect(self):
        now = timezone.now()
        year, month = pricing.month_of(now)
        hours = pricing.hours_in_month(year, month)
        products = {p.pk: p for p in Product.objects.all()}
        by_state = dict(Order.objects.values_list("state").annotate(n=Count("id")))
        orders = GaugeMetricFamily(
            "tranche_orders", "orders in each state (pending, provisioning, active, ...)",
            labels=["state"],
        )  # fmt: skip
        for state in Order.State.values:
            orders.add_metric([state], by_state.get(state, 0))
        yield orders
        sold: dict[int, int] = defaultdict(int)
        run_rate: dict[int, Decimal] = defaultdict(Decimal)
        for subs in charges.subscription_months(None, year, month).values():
            for sub in subs:
                sold[sub.product_id] += charges.current_quantity(sub)
                held = priced.held_at(sub.orders, now + timedelta(seconds=1))
                run_rate[sub.product_id] += sum(held, Decimal(0)) / hours
        usage = {
            pk: (a or 0, p or 0)
            for pk, a, p in ProjectUsage.objects.values_list("product_id").annotate(
                a=Sum("allocated"), p=Sum("pending")
            )
        }
        labels = ["product", "gpu_model", "currency"]
        fams = {
            "sold": GaugeMetricFamily(
                "tranche_product_slices_sold", "slices subscriptions hold now", labels=labels[:2]
            ),
            "allocated": GaugeMetricFamily(
                "tranche_product_slices_allocated",
                "slices allocated in the cluster (claims the watcher counted)", labels=labels[:2],
            ),
            "pending": GaugeMetricFamily(
                "tranche_product_slices_pending",
                "slices claimed but waiting for a GPU (Pending claims)", labels=labels[:2],
            ),
            "price": GaugeMetricFamily(
                "tranche_product_price_per_slice_hour",
                "what one slice costs per hour this month (monthly price / hours of the month)",
                labels=labels,
            ),
            "rate": GaugeMetricFamily(
                "tranche_product_revenue_per_hour",
                "revenue run-rate: what the slices held now are charged per hour",
                labels=labels,
            ),
        }  # fmt: skip
        for pk, p in products.items():
            model = p.gpu_model.name if p.gpu_model_id else ""
            fams["sold"].add_metric([p.device_class, model], sold.get(pk, 0))
            allocated, pending = usage.get(pk, (0, 0))
            fams["allocated"].add_metric([p.device_class, model], allocated)
            fams["pending"].add_metric([p.device_class, model], pending)
            unit = float(p.monthly_price / hours)  # unrounded: 0.121 is not 0.12
            fams["price"].add_metric([p.device_class, model, p.currency], unit)
            rate = float(round(run_rate.get(pk, Decimal(0)), 4))
            fams["rate"].add_metric([p.device_class, model, p.currency], rate)
        yield from fams.values()
