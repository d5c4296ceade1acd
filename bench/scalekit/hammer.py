"""A closed-loop HTTP load generator spread over processes, so the client is not the limit.

`closed_loop(url, path, clients, seconds, cookie=...)`: `clients` keep-alive connections, each
sending its next GET when the previous answer arrived (no think time), split over `procs`
processes (one Python process's threads top out near 2,000 requests/s, below what a multi-process
portal answers for `/healthz`). Returns requests/s, p50/p95/p99 latency and errors (non-200
answers and failed connections, each counted; a failed connection is reopened).
"""

from __future__ import annotations

import http.client
import multiprocessing
import threading
import time
from urllib.parse import urlsplit


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def _worker(url: str, path: str, cookie: str, threads: int, stop_at: float, out) -> None:  # noqa: PLR0917
    parts = urlsplit(url)
    headers = {"Cookie": cookie} if cookie else {}
    lat: list[list[float]] = [[] for _ in range(threads)]
    errors = [0] * threads

    def client(i: int) -> None:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        while time.monotonic() < stop_at:
            began = time.monotonic()
            try:
                conn.request("GET", path, headers=headers)
                resp = conn.getresponse()
                resp.read()
                if resp.status != 200:
                    errors[i] += 1
                    continue
                lat[i].append(time.monotonic() - began)
            except (OSError, http.client.HTTPException):
                errors[i] += 1
                conn.close()
                conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        conn.close()

    pool = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(max(1.0, stop_at - time.monotonic() + 60))
    out.put(([x for per in lat for x in per], sum(errors)))


def closed_loop(url: str, path: str, clients: int, seconds: float, *, cookie: str = "",
                procs: int = 4) -> dict:  # fmt: skip
    """Requests/s and latency of `clients` closed-loop clients for `seconds`."""
    procs = max(1, min(procs, clients))
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    stop_at = time.monotonic() + seconds
    split = [clients // procs + (1 if i < clients % procs else 0) for i in range(procs)]
    workers = [ctx.Process(target=_worker, args=(url, path, cookie, n, stop_at, out))
               for n in split]  # fmt: skip
    for w in workers:
        w.start()
    latencies: list[float] = []
    errors = 0
    for _ in workers:
        lat, err = out.get(timeout=seconds + 120)
        latencies.extend(lat)
        errors += err
    for w in workers:
        w.join(10)
    return {
        "clients": clients,
        "seconds": seconds,
        "per_s": round(len(latencies) / seconds, 1),
        "p50_ms": round(1000 * percentile(latencies, 50), 1),
        "p95_ms": round(1000 * percentile(latencies, 95), 1),
        "p99_ms": round(1000 * percentile(latencies, 99), 1),
        "requests": len(latencies),
        "errors": errors,
    }
