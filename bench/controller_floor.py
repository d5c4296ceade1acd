"""The controller's cost over the floor: order -> active through `reconcile_project` beside the
same project's objects applied directly (one server-side apply each), in one process.

This is bench/scale.py's order-probe measurement without the queue and the fleet: per round one
resize order is placed through the portal's order service, then reconciled in process (order
placed -> `active` stored), then the project's rendered objects are applied directly. It prints
p50/p99 of both and their ratio, and writes bench/results/controller_floor.json. Needs
PostgreSQL, Redis and the dev cluster (`make cluster-up`); it uses its own database.

It runs the tree it sits in: copied into a checkout of another commit (e.g. 7382faa) it
measures that commit's controller the same way, which is how the figures compare side by side.
Run: `.venv/bin/python bench/controller_floor.py [--rounds 30] [--label NAME]`.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("TRANCHE_DEBUG", "1")
os.environ.setdefault("TRANCHE_DB_NAME", "tranche_floor")
os.environ["TRANCHE_CELERY_QUEUE"] = f"tranche-floor-{secrets.token_hex(3)}"  # nobody consumes


def summary(seconds: list[float]) -> dict:
    ordered = sorted(seconds)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50_ms": round(1000 * statistics.median(ordered), 1), "p99_ms": round(1000 * p99, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--label", default="this tree")
    parser.add_argument("--output", type=Path, default=ROOT / "bench/results/controller_floor.json")
    args = parser.parse_args()

    import django
    from django.core.management import call_command
    from django.db import connection
    from order_latency import ensure_database  # the same bench database helper

    ensure_database(os.environ["TRANCHE_DB_NAME"])
    django.setup()
    call_command("migrate", verbosity=0)

    from controller import desired
    from controller.apply import Applier, shared_api_client
    from controller.reconcile import reconcile_project
    from controller.render.bundle import render_project
    from portal.catalog.seed import ensure_catalogue
    from portal.orders.models import Order
    from portal.orders.services import place_order
    from portal.tenants.models import Membership
    from portal.tenants.services import sign_up

    product = {p.device_class: p for p in ensure_catalogue()}["tranche-v100-8g"]
    tag = secrets.token_hex(3)
    user, _org, project = sign_up(
        username=f"floor-{tag}", email=f"floor-{tag}@example.test",
        password=secrets.token_urlsafe(12), organization_name=f"floor {tag}", project_name="ml",
    )  # fmt: skip
    membership = Membership.objects.get(user=user)
    applier = Applier(shared_api_client())
    reconcile_project(project.pk, applier)  # the namespace and the platform exist from here on

    controller, direct = [], []
    for i in range(args.rounds):
        order, _ = place_order(
            membership=membership, project=project, product=product, quantity=1 + i % 2 + 1,
            idempotency_key=secrets.token_hex(8),
        )  # fmt: skip
        began = time.perf_counter()
        reconcile_project(project.pk, applier)
        controller.append(time.perf_counter() - began)
        assert Order.objects.get(pk=order.pk).state == Order.State.ACTIVE
        objects = render_project(desired.load_project(project.pk).spec)
        began = time.perf_counter()
        for obj in objects:
            applier.apply(obj)
        direct.append(time.perf_counter() - began)
    ctl, base = summary(controller), summary(direct)
    figures = {
        "label": args.label,
        "rounds": args.rounds,
        "objects": len(objects),
        "order_to_active": ctl,
        "direct_apply": base,
        "ratio_p50": round(ctl["p50_ms"] / base["p50_ms"], 2),
    }
    connection.close()
    print(json.dumps(figures))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    runs = json.loads(args.output.read_text()) if args.output.exists() else []
    args.output.write_text(json.dumps([*runs, figures], indent=2) + "\n")


if __name__ == "__main__":
    main()
