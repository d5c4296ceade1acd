"""Order → Ready latency through the real path: portal order, Redis, Celery worker, API server.

Places 200 orders one after another (each waits for `active`), then a burst of 1,000 orders over
50 projects at once, and prints p50/p99 of (order created → order active) for both; results go to
bench/results/order_latency.json. Needs PostgreSQL, Redis and the dev cluster (`make cluster-up`).
Run: `.venv/bin/python bench/order_latency.py [--sequential 200] [--burst 1000] [--workers 2]`.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUEUE = f"tranche-bench-{secrets.token_hex(3)}"
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("TRANCHE_DEBUG", "1")
os.environ["TRANCHE_CELERY_QUEUE"] = QUEUE
# Its own database, so ~1,200 bench orders never land in the demo's (the workers inherit it).
os.environ.setdefault("TRANCHE_DB_NAME", "tranche_bench")
sys.path.insert(0, str(ROOT))


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def start_workers(count: int) -> subprocess.Popen:
    from deploy.local.celery_worker import worker_argv

    cmd = worker_argv(QUEUE, concurrency=count, loglevel="warning")
    return subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def wait_active(order_ids: list[int], timeout: float) -> dict[int, float]:
    """Latency (s) of each order from creation to its `active` history entry."""
    from portal.orders.models import Order, OrderEvent

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = Order.objects.filter(pk__in=order_ids, state=Order.State.ACTIVE).count()
        if done == len(order_ids):
            break
        time.sleep(0.05)
    else:
        sys.exit(f"only {done}/{len(order_ids)} orders active after {timeout:.0f}s")
    created = dict(Order.objects.filter(pk__in=order_ids).values_list("pk", "created_at"))
    events = OrderEvent.objects.filter(order_id__in=order_ids, to_state="active")
    return {e.order_id: (e.at - created[e.order_id]).total_seconds() for e in events}


def delete_namespaces(names: list[str]) -> None:
    """Remove the bench's namespaces: the shared dev cluster is not ours to fill up."""
    from kubernetes import client

    from controller.apply import kube_api_client

    core = client.CoreV1Api(kube_api_client())
    for name in names:
        try:
            core.delete_namespace(name, propagation_policy="Background")
        except client.ApiException as exc:
            if exc.status != 404:
                raise


def ensure_database(name: str) -> None:
    """Create the bench database on first use (the portal's role has CREATEDB)."""
    import psycopg
    from psycopg import sql

    from portal import settings

    db = settings.DATABASES["default"]
    with psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], password=db["PASSWORD"],
        dbname="postgres", autocommit=True,
    ) as conn:  # fmt: skip
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sequential", type=int, default=200)
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument("--projects", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="leave the bench namespaces")
    args = parser.parse_args()

    import django

    ensure_database(os.environ["TRANCHE_DB_NAME"])
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from portal.catalog.seed import ensure_catalogue
    from portal.orders.services import place_order
    from portal.tenants.models import Membership, Project
    from portal.tenants.services import sign_up
    from tranche.naming import derive_namespace

    product = {p.device_class: p for p in ensure_catalogue()}["tranche-v100-8g"]
    tag = secrets.token_hex(3)
    user, org, first = sign_up(
        username=f"bench-{tag}",
        email=f"b{tag}@example.test",
        password=secrets.token_hex(8),
        organization_name=f"bench {tag}",
        project_name="p0",
    )
    membership = Membership.objects.get(user=user, organization=org)
    projects = [first] + [
        Project.objects.create(
            organization=org,
            name=f"p{i}",
            slug=f"p{i}",
            namespace=derive_namespace(org.slug, f"p{i}"),
        )
        for i in range(1, args.projects)
    ]
    quantity = dict.fromkeys((p.pk for p in projects), 0)

    def order(project: Project) -> int:
        quantity[project.pk] = quantity[project.pk] % 16 + 1
        o, _ = place_order(
            membership=membership,
            project=project,
            product=product,
            quantity=quantity[project.pk],
            idempotency_key=secrets.token_hex(8),
        )
        return o.pk

    workers = start_workers(args.workers)
    try:
        wait_active([order(first)], 120)  # warm-up: platform objects, first namespace
        seq = []
        for i in range(args.sequential):
            seq += wait_active([order(projects[i % len(projects)])], 60).values()
        started = time.monotonic()
        ids = [order(projects[i % len(projects)]) for i in range(args.burst)]
        placed = time.monotonic() - started
        burst = list(wait_active(ids, 900).values())
        drained = time.monotonic() - started
    finally:
        workers.send_signal(signal.SIGTERM)
        workers.wait(30)
    result = {
        "sequential": {
            "orders": len(seq),
            "p50_s": round(percentile(seq, 50), 3),
            "p99_s": round(percentile(seq, 99), 3),
            "mean_s": round(statistics.fmean(seq), 3),
        },
        "burst": {
            "orders": len(burst),
            "projects": args.projects,
            "p50_s": round(percentile(burst, 50), 3),
            "p99_s": round(percentile(burst, 99), 3),
            "placed_in_s": round(placed, 1),
            "all_active_in_s": round(drained, 1),
        },
        "workers": args.workers,
        "cpus": os.cpu_count(),
    }
    out = ROOT / "bench" / "results" / "order_latency.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    if args.keep:
        print(f"written to {out}; namespaces of {org.slug} are left for inspection")
        return
    delete_namespaces([p.namespace for p in projects])
    print(f"written to {out}; {len(projects)} bench namespaces deleted (--keep leaves them)")


if __name__ == "__main__":
    main()
