"""p50/p90 of the login page and the order-confirm page, before and after a change, in one run.

Extracts the "before" commit (default b6aafaa, the tree issue #14's attack run used) into a
temporary folder, then measures it and the working tree at the same time (each in its own process
with its own fresh database, migrated by that tree's code, on the same PostgreSQL and Redis;
both start timing together, so a busy shared machine slows both alike instead of whichever
ran second): GET and POST of /login/ (a real password check: PBKDF2, plus login throttling where the
tree has it) and GET (the quote) and POST (placing the order) of the order-confirm page. Requests
go through Django's full middleware stack in process (test client; no network, no daphne).
Prints both side by side and writes bench/results/page_latency.json.
Run: `.venv/bin/python bench/page_latency.py [--before b6aafaa] [--requests 200]`.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("login GET", "login POST", "order-confirm GET", "order-confirm POST")


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def _wait_for_both(barrier: Path, label: str) -> None:
    (barrier / label).touch()
    deadline = time.monotonic() + 600
    while len(list(barrier.iterdir())) < 2:
        if time.monotonic() > deadline:
            raise SystemExit("the other tree never got ready")
        time.sleep(0.05)


def measure(requests: int, barrier: Path, label: str) -> dict[str, list[float]]:
    """Child: runs inside the tree under test (its code first on sys.path, Django set up)."""
    import django

    django.setup()
    from django.test import Client
    from django.test.utils import setup_databases, setup_test_environment, teardown_databases

    setup_test_environment()
    databases = setup_databases(verbosity=0, interactive=False)
    try:
        try:
            from portal.core import queue
        except ImportError:  # trees before the queue moved to core
            from portal.orders import queue

        queue.send_reconcile = lambda project_id: None  # no broker traffic from the bench
        try:
            from tests.helpers.factories import PASSWORD, make_world
        except ImportError:  # trees before the test helpers moved
            from tests.factories import PASSWORD, make_world

        world = make_world()
        product = world.products["tranche-v100-8g"]
        confirm_url = f"/projects/{world.project_a.pk}/order/confirm/"
        timings: dict[str, list[float]] = {page: [] for page in PAGES}

        def timed(page: str, call):
            start = time.perf_counter()
            response = call()
            timings[page].append((time.perf_counter() - start) * 1000)
            return response

        anonymous = Client()
        owner = Client()
        owner.force_login(world.owner)
        _wait_for_both(barrier, label)
        for i in range(requests + 20):  # the first 20 of each warm up and are dropped
            timed("login GET", lambda: anonymous.get("/login/"))
            credentials = {"username": world.member.username, "password": PASSWORD}
            response = timed("login POST", lambda c=credentials: Client().post("/login/", c))
            assert response.status_code == 302, response.status_code
            quantity = 1 + i % 2 + (i // 2) % 2  # 1, 2, 2, 3, 1, ...: always a change
            query = {"product": product.pk, "quantity": quantity}
            response = timed("order-confirm GET", lambda q=query: owner.get(confirm_url, q))
            if response.status_code != 200:  # same as the current quantity: skip the POST
                continue
            quote = response.context["quote"]
            data = {
                **query,
                "idempotency_key": f"bench-{i}",
                "confirmed_from": quote.from_quantity,
                "confirmed_version": getattr(quote, "subscription_version", 0),
                "confirmed_charge": str(quote.prorata_charge),
            }
            response = timed("order-confirm POST", lambda d=data: owner.post(confirm_url, d))
            assert response.status_code == 302, response.content[:500]
        return {page: values[20:] for page, values in timings.items()}
    finally:
        teardown_databases(databases, verbosity=0)


def start_tree(tree: Path, label: str, requests: int, barrier: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "TRANCHE_DEBUG": "1",
        "TRANCHE_STATE_DIR": os.environ.get("TRANCHE_STATE_DIR", str(ROOT / ".state")),
        # Django's test runner drops a test database of the same name: one name per run
        "TRANCHE_DB_NAME": f"tranche_bench_pages_{label}_{os.getpid()}_{secrets.token_hex(3)}",
        "TRANCHE_LOG_LEVEL": "ERROR",
    }
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(1, sys.argv[2]);"
        "import page_latency as bench;"
        "from pathlib import Path;"
        "print('RESULT ' + json.dumps(bench.measure(int(sys.argv[3]), Path(sys.argv[4]),"
        " sys.argv[5])))"
    )
    argv = [str(tree), str(ROOT / "bench"), str(requests), str(barrier), label]
    return subprocess.Popen(
        [sys.executable, "-c", code, *argv],
        cwd=tree,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def collect(proc: subprocess.Popen, label: str) -> dict[str, dict[str, float]]:
    stdout, stderr = proc.communicate()
    line = next((x for x in stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{label} run failed:\n{stdout[-3000:]}\n{stderr[-3000:]}")
    raw = json.loads(line.removeprefix("RESULT "))
    return {
        page: {
            "p50_ms": round(statistics.median(v), 2),
            "p90_ms": round(percentile(v, 90), 2),
            "n": len(v),
        }
        for page, v in raw.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="b6aafaa", help="commit to compare against")
    parser.add_argument("--requests", type=int, default=200, help="timed requests per page")
    args = parser.parse_args()
    after_ref = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with (
        tempfile.TemporaryDirectory(prefix="tranche-before-") as tmp,
        tempfile.TemporaryDirectory(prefix="tranche-barrier-") as barrier,
    ):
        archive = subprocess.run(
            ["git", "archive", args.before], cwd=ROOT, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        procs = {
            "before": start_tree(Path(tmp), "before", args.requests, Path(barrier)),
            "after": start_tree(ROOT, "after", args.requests, Path(barrier)),
        }
        before, after = (collect(procs[label], label) for label in ("before", "after"))
    print(f"{'page':<20} {'before p50':>11} {'after p50':>10} {'before p90':>11} {'after p90':>10}")
    for page in PAGES:
        b, a = before[page], after[page]
        print(
            f"{page:<20} {b['p50_ms']:>9.2f}ms {a['p50_ms']:>8.2f}ms "
            f"{b['p90_ms']:>9.2f}ms {a['p90_ms']:>8.2f}ms"
        )
    result = {
        "before": {"ref": args.before, **before},
        "after": {"ref": f"{after_ref} (working tree)", **after},
        "requests_per_page": args.requests,
        "how": "both trees at once, each a Django test client in its own process (full middleware"
        " stack) on its own PostgreSQL database",
    }
    out = ROOT / "bench" / "results" / "page_latency.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
