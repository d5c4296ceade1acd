"""Pre-flight under abuse (#28): an alias bomb, and 50 parallel calls at a silent registry.

Serves the portal for real (daphne, a pool of 20 database connections as `make run` gives it, a
fresh test database on the project's PostgreSQL and Redis) with a real pre-flight worker
(threads, as `make run` starts it) whose outbound rules allow-list the bench's loopback
listener, then:

1. POSTs a 523-byte alias bomb (7 levels of 10 aliases) and a string bomb (200 KB aliased
   2,000 times) to the JSON API: their latency beside that of the smallest refusal (a one-line
   manifest that is no object: the floor of any answer), the time the refusal itself takes in
   `parse_manifest`, their verdicts, and the portal's RSS (VmRSS of the daphne process) before
   and after.
2. Starts 50 pre-flight calls at once (25 organisations x 2: each within its limits), each naming
   3 images on a listener that accepts and never answers, while another tenant's quota page is
   fetched over and over and `/readyz?scope=portal` polled: the page's p50/p95, every readyz
   status seen, and each call's answer time against its deadline (counted by the portal from
   the request's arrival).

The cluster checks are pointed at a missing kubeconfig (they answer "not checked" at once), so
the figures are about the registry path. Prints the figures and writes
bench/results/preflight_abuse.json.
Run: `.venv/bin/python bench/preflight_abuse.py [--calls 50] [--deadline 10]`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import urllib3

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The same manifests the tests send (no Django needed to build them).
from tests.integration.preflight.hostile import alias_bomb, string_bomb, workload  # noqa: E402


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def rss_mib(port: int) -> float:
    """VmRSS of the daphne process serving `port`."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"daphne") for a in argv) and str(port).encode() in argv:
            for line in (proc / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    raise LookupError(f"no daphne on port {port}")


def main() -> None:  # noqa: PLR0915 (one scenario, read top to bottom)
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--deadline", type=int, default=10, help="per-call deadline, seconds")
    args = parser.parse_args()

    os.environ.setdefault("TRANCHE_DEBUG", "1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_databases, setup_test_environment, teardown_databases

    from deploy.local.celery_worker import worker_argv
    from portal.catalog.seed import ensure_catalogue
    from portal.preflight.tokens import create_token
    from tests.helpers.celery_worker import stop_worker
    from tests.helpers.factories import make_tenant
    from tests.helpers.portal import serve_portal
    from tests.helpers.wait import wait_for
    from tests.integration.preflight.hostile import silent_listener

    setup_test_environment()
    databases = setup_databases(verbosity=0, interactive=False)
    queue = f"preflight-bench-{secrets.token_hex(3)}"
    results: dict = {}
    try:
        ensure_catalogue()
        callers = []
        for i in range((args.calls + 1) // 2):
            user, _org, project = make_tenant(f"abuser{i}", f"Abuse org {i}")
            callers += [(project.pk, create_token(user, "bench")[1])] * 2
        callers = callers[: args.calls]
        victim, _org, victim_project = make_tenant("bystander", "Bystander org")
        session = Client()
        session.force_login(victim)
        cookie = (
            f"{settings.SESSION_COOKIE_NAME}={session.cookies[settings.SESSION_COOKIE_NAME].value}"
        )
        with silent_listener() as host:
            os.environ.update({
                "TRANCHE_DB_POOL_MAX_SIZE": "20",
                "TRANCHE_PREFLIGHT_QUEUE": queue,
                "TRANCHE_PREFLIGHT_PLAIN_HTTP_REGISTRIES": host,
                "TRANCHE_PREFLIGHT_ALLOWED_REGISTRIES": host,
                "TRANCHE_PREFLIGHT_CALL_DEADLINE": str(args.deadline),
                "TRANCHE_PREFLIGHT_IMAGE_DEADLINE": "30",
                "TRANCHE_PREFLIGHT_KEY_PREFIX": f"bench-{queue}",
                "TRANCHE_CLUSTER_ACCESS_KUBECONFIG": "/nonexistent/kubeconfig",
            })  # fmt: skip
            log = Path(tempfile.mkstemp(prefix="tr-preflight-worker-", suffix=".log")[1])
            env = {**os.environ, "TRANCHE_DB_NAME": connection.settings_dict["NAME"],
                   "PYTHONPATH": str(ROOT)}  # fmt: skip
            with log.open("ab") as out:
                worker = subprocess.Popen(
                    worker_argv(queue, name=f"{queue}@localhost", concurrency=8, pool="threads"),
                    cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip
            try:
                wait_for(lambda: b"ready." in log.read_bytes(), 60, "the pre-flight worker")
                with serve_portal(connection.settings_dict["NAME"]) as portal:
                    results = run(portal, callers, victim_project.pk, cookie, host=host, args=args)
            finally:
                stop_worker(worker)
    finally:
        teardown_databases(databases, verbosity=0)
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "preflight_abuse.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


def measure_bombs(api, caller: tuple[int, str], port: int) -> dict:
    """The alias and string bombs against the smallest refusal, over HTTP and in the parser."""
    from portal.preflight.manifest import ManifestError, parse_manifest

    def timed(body: str, times: int = 9) -> tuple[list[float], dict]:
        took = []
        for _ in range(times):
            started = time.perf_counter()
            resp = api(*caller, body)
            took.append((time.perf_counter() - started) * 1000)
        return took, json.loads(resp.data)["verdicts"][0]

    def parse_ms(body: str) -> float:
        took = []
        for _ in range(9):
            started = time.perf_counter()
            with contextlib.suppress(ManifestError):
                parse_manifest(body)
            took.append((time.perf_counter() - started) * 1000)
        return round(percentile(took, 50), 2)

    bomb, strings = alias_bomb(7), string_bomb(200_000, 2_000)
    rss_before = rss_mib(port)
    floor_ms, _floor = timed("just: text\n")
    rss_warm = rss_mib(port)  # after nine plain refusals: what serving any call costs at first
    bomb_ms, verdict = timed(bomb)
    rss_after_alias = rss_mib(port)
    string_ms, string_verdict = timed(strings)
    rss_after = rss_mib(port)
    return {
        "bytes": len(bomb), "http_ms_median": round(percentile(bomb_ms, 50), 1),
        "http_ms_max": round(max(bomb_ms), 1), "parse_ms_median": parse_ms(bomb),
        "verdict": verdict["reason"][:120],
        "string_bomb_bytes": len(strings),
        "string_bomb_http_ms_median": round(percentile(string_ms, 50), 1),
        "string_bomb_parse_ms_median": parse_ms(strings),
        "string_bomb_verdict": string_verdict["reason"][:120],
        "smallest_refusal_http_ms_median": round(percentile(floor_ms, 50), 1),
        "portal_rss_mib_before": round(rss_before, 1),
        "portal_rss_mib_warm": round(rss_warm, 1),
        "portal_rss_mib_after_alias_bomb": round(rss_after_alias, 1),
        "portal_rss_mib_after": round(rss_after, 1),
    }  # fmt: skip


def run(portal, callers, victim_pk: int, cookie: str, *, host: str, args) -> dict:
    base = portal.http_base
    port = int(base.rsplit(":", 1)[1])
    http = urllib3.PoolManager(maxsize=args.calls + 10, timeout=urllib3.Timeout(60))

    def api(project_pk: int, token: str, body: str):
        return http.request(
            "POST", f"{base}/api/v1/projects/{project_pk}/preflight", body=body.encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"},
        )  # fmt: skip

    quota_url = f"{base}/projects/{victim_pk}/"
    assert http.request("GET", quota_url, headers={"Cookie": cookie}).status == 200
    api(*callers[0], "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: warm}\n")  # warm-up

    bombs = measure_bombs(api, callers[1], port)

    stop = threading.Event()
    page_ms: list[float] = []
    readyz: dict[int, int] = {}
    answers: list[tuple[float, int, bool]] = []
    other: dict[int, str] = {}

    def watch_page() -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            status = http.request("GET", quota_url, headers={"Cookie": cookie}).status
            page_ms.append((time.perf_counter() - t0) * 1000 if status == 200 else float("inf"))
            code = http.request("GET", f"{base}/readyz?scope=portal").status
            readyz[code] = readyz.get(code, 0) + 1
            time.sleep(0.05)

    images = [f"{host}/x/y{i}:1" for i in range(3)]

    def call(project_pk: int, token: str) -> None:
        t0 = time.monotonic()
        resp = api(project_pk, token, workload(*images))
        took = time.monotonic() - t0
        try:
            body = json.loads(resp.data)
        except ValueError:  # an error page: counted by status, one sample of it kept
            other.setdefault(resp.status, resp.data[:300].decode("utf-8", "replace"))
            answers.append((took, resp.status, False))
            return
        on_time = resp.status == 429 or all(
            f"within {args.deadline} s" in v["reason"]
            for v in body.get("verdicts", [])
            if v["check"] == "gpu_code"
        )
        answers.append((took, resp.status, on_time))

    watcher = threading.Thread(target=watch_page)
    watcher.start()
    time.sleep(1)
    baseline = list(page_ms)
    threads = [threading.Thread(target=call, args=c) for c in callers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    stop.set()
    watcher.join()
    during = page_ms[len(baseline) :]
    took = [a[0] for a in answers]
    return {
        "alias_bomb": bombs,
        "silent_registry": {
            "calls": len(callers), "images_per_call": len(images),
            "call_deadline_s": args.deadline,
            "answered": len(answers),
            "statuses": dict(Counter(a[1] for a in answers)),
            "error_pages": other,
            "answered_within_deadline": sum(t <= args.deadline for t in took),
            "verdict_names_the_deadline": sum(a[2] for a in answers),
            "call_s_median_max_by_status": {
                code: [round(percentile(ts, 50), 2), round(max(ts), 2)]
                for code in sorted({a[1] for a in answers})
                if (ts := [a[0] for a in answers if a[1] == code])
            },
            "call_s_median": round(percentile(took, 50), 2) if took else None,
            "call_s_max": round(max(took), 2) if took else None,
            "quota_page_ms_p50": round(percentile(during, 50), 1),
            "quota_page_ms_p95": round(percentile(during, 95), 1),
            "quota_page_requests": len(during),
            "quota_page_ms_p50_before": round(percentile(baseline, 50), 1) if baseline else None,
            "readyz_statuses": readyz,
        },
    }  # fmt: skip


if __name__ == "__main__":
    main()
