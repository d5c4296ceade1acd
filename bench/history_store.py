"""Pod history store: 24 h of 1 s agent samples for 200 pods, then the live page's chart queries.

Feeds `portal.agents.history.record_samples` one minute of samples for every pod per call (what
200 pods reporting every second for a minute add up to), 1,440 times, then prunes, and times the
charts' queries (the project's series and each pod's). Prints samples fed, rows kept (bounded:
pods x 1,440 minutes), insert throughput and query p50/p95; results go to
bench/results/history_store.json. Needs PostgreSQL (`make setup`); its own database.
Run: `.venv/bin/python bench/history_store.py [--pods 200] [--hours 24]`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("TRANCHE_DEBUG", "1")
os.environ.setdefault("TRANCHE_DB_NAME", "tranche_bench")
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from order_latency import ensure_database, percentile  # noqa: E402

GIB = 1024**3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--hours", type=float, default=24)
    args = parser.parse_args()
    import django

    ensure_database(os.environ["TRANCHE_DB_NAME"])
    django.setup()
    from django.core.management import call_command
    from django.db import transaction

    call_command("migrate", verbosity=0)
    from portal.agents import history
    from portal.agents.models import PodMinute
    from portal.tenants.models import Organization, Project

    org, _ = Organization.objects.get_or_create(slug="bench-history", defaults={"name": "Bench"})
    project, _ = Project.objects.get_or_create(
        organization=org, slug="h", defaults={"name": "H", "namespace": "bench-history-h"}
    )
    PodMinute.objects.filter(project=project).delete()
    now = datetime.now(tz=UTC).replace(second=0, microsecond=0)
    start = now - timedelta(hours=args.hours)
    minutes = int(args.hours * 60)
    pods = [f"pod-{i:03d}" for i in range(args.pods)]
    fed, began = 0, time.monotonic()
    for m in range(minutes):
        t0 = (start + timedelta(minutes=m)).timestamp()
        batch = [
            history.Sample(project.pk, project.namespace, pod, t0 + s, (s + i) % 8 * GIB, 8 * GIB,
                           float((s * 7 + i) % 30), 25)
            for i, pod in enumerate(pods)
            for s in range(60)
        ]  # fmt: skip
        with transaction.atomic():
            history.record_samples(batch, now)
        fed += len(batch)
        if m % 120 == 0:
            print(f"  {m // 60:>2} h fed ({fed:,} samples, {time.monotonic() - began:.0f} s)")
    insert_seconds = time.monotonic() - began
    history.prune(now + timedelta(minutes=1), force=True)
    rows = PodMinute.objects.filter(project=project).count()
    timings = []
    for i in range(50):
        t = time.monotonic()
        history.series(project.pk, now=now)
        history.series(project.pk, pods[i % len(pods)], now=now)
        timings.append((time.monotonic() - t) * 1000)
    result = {
        "pods": args.pods,
        "hours": args.hours,
        "samples_fed": fed,
        "rows_kept": rows,
        "rows_bound": args.pods * minutes,
        "insert_seconds": round(insert_seconds, 1),
        "samples_per_second": round(fed / insert_seconds),
        "chart_query_ms_p50": round(percentile(timings, 50), 1),
        "chart_query_ms_p95": round(percentile(timings, 95), 1),
    }
    print(json.dumps(result, indent=2))
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "history_store.json").write_text(json.dumps(result, indent=2) + "\n")
    PodMinute.objects.filter(project=project).delete()


if __name__ == "__main__":
    main()
