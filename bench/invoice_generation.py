"""Monthly invoice run over 1,000 organizations x 3 products: time and queries per invoice.

Builds (once) 1,000 organizations with one project each holding 3 products (bought the month
before, then resized mid-month, so every invoice has full-month and pro-ration lines), clears
the bench month's invoices, runs `billing.services.run_monthly_invoices` and prints the wall
time and database queries per invoice, then runs it again (idempotent: nothing created).
Results go to bench/results/invoice_generation.json. Needs PostgreSQL only, in its own database.
Run: `.venv/bin/python bench/invoice_generation.py [--orgs 1000]`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("TRANCHE_DEBUG", "1")
os.environ.setdefault("TRANCHE_DB_NAME", "tranche_bench_invoices")
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

YEAR, MONTH = 2026, 11


class QueryCounter:
    """Counts every statement sent to the database (savepoints included)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)


def build_world(count: int) -> None:
    """Organizations bench-inv-<i> with 3 subscriptions and their orders (bulk, idempotent)."""
    from portal.catalog.seed import ensure_catalogue
    from portal.orders.models import Order, Subscription
    from portal.tenants.models import Organization, Project
    from tranche.naming import derive_namespace

    products = list(ensure_catalogue())[:3]
    have = Organization.objects.filter(slug__startswith="bench-inv-").count()
    if have >= count:
        return
    orgs = Organization.objects.bulk_create(
        [Organization(name=f"Bench {i}", slug=f"bench-inv-{i}") for i in range(have, count)]
    )
    projects = Project.objects.bulk_create(
        [
            Project(organization=o, name="ml", slug="ml", namespace=derive_namespace(o.slug, "ml"))
            for o in orgs
        ]
    )
    subs = Subscription.objects.bulk_create(
        [Subscription(project=p, product=prod, quantity=2) for p in projects for prod in products]
    )
    orders = []
    for n, sub in enumerate(subs):
        org_id = sub.project.organization_id
        for key, (at, before, after) in enumerate(
            [
                (datetime(YEAR, MONTH - 1, 15, 10, tzinfo=UTC), 0, 1),
                (datetime(YEAR, MONTH, 1 + n % 28, n % 24, tzinfo=UTC), 1, 2),
            ]
        ):
            orders.append(
                Order(
                    organization_id=org_id,
                    project=sub.project,
                    product=sub.product,
                    subscription=sub,
                    kind="buy" if before == 0 else "resize",
                    from_quantity=before,
                    quantity=after,
                    state="active",
                    idempotency_key=f"bench-{sub.pk}-{key}",
                    unit_monthly_price=sub.product.monthly_price,
                    monthly_total=sub.product.monthly_price * after,
                    prorata_charge=0,
                    currency=sub.product.currency,
                    created_at=at,
                )
            )
    dates = [o.created_at for o in orders]
    created = Order.objects.bulk_create(orders)  # auto_now_add overrides the dates: set them back
    for order, at in zip(created, dates, strict=True):
        order.created_at = at
    Order.objects.bulk_update(created, ["created_at"], batch_size=1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--orgs", type=int, default=1000)
    args = parser.parse_args()

    import django
    from order_latency import ensure_database

    ensure_database(os.environ["TRANCHE_DB_NAME"])
    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    from portal.billing.models import CreditNote, DocumentCounter, Invoice, InvoiceLine
    from portal.billing.services import run_monthly_invoices

    t0 = time.perf_counter()
    build_world(args.orgs)
    print(f"world ready in {time.perf_counter() - t0:.1f}s")
    CreditNote.objects.all().delete()
    InvoiceLine.objects.all().delete()
    Invoice.objects.all().delete()
    DocumentCounter.objects.all().delete()

    first_q, again_q = QueryCounter(), QueryCounter()
    with connection.execute_wrapper(first_q):
        t0 = time.perf_counter()
        first = run_monthly_invoices(YEAR, MONTH)
        first_s = time.perf_counter() - t0
    with connection.execute_wrapper(again_q):
        t0 = time.perf_counter()
        again = run_monthly_invoices(YEAR, MONTH)
        again_s = time.perf_counter() - t0
    invoices = first["created"]
    lines = InvoiceLine.objects.count()
    numbers = sorted(Invoice.objects.values_list("number", flat=True))
    result = {
        "organizations": args.orgs,
        "products_per_org": 3,
        "invoices": invoices,
        "lines": lines,
        "run_seconds": round(first_s, 2),
        "ms_per_invoice": round(first_s * 1000 / max(invoices, 1), 2),
        "queries": first_q.count,
        "queries_per_invoice": round(first_q.count / max(invoices, 1), 2),
        "rerun_created": again["created"],
        "rerun_seconds": round(again_s, 2),
        "rerun_queries": again_q.count,
        "numbers_gapless": numbers == list(range(1, invoices + 1)),
    }
    print(json.dumps(result, indent=2))
    out = ROOT / "bench" / "results" / "invoice_generation.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
