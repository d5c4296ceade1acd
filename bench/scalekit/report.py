"""The README's fleet table from bench/scale.py's figures: one row per figure, one column per
step, the goal beside it. `python bench/scalekit/report.py [bench/results/scale.json]` prints
Markdown; the table in docs/benchmarks.md ("At fleet size") is this output, pasted."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results" / "scale.json"


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{1000 * seconds:,.0f} ms"


def _s(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds:,.1f} s"


def _get(step: dict, *path: str):
    value = step
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _pages(step: dict, page: str) -> str:
    fig = _get(step, "portal", "pages", page)
    if not fig:
        return "—"
    return f"{fig['p50_ms']:.0f} / {fig['p95_ms']:.0f} ms, {fig.get('errors', 0)} errors"


def _fanout(step: dict) -> str:
    fig = _get(step, "portal", "fanout")
    if not fig:
        return "—"
    return f"{fig['delivered_per_s']:,.0f}/s, lag p99 {fig['lag_p99_s']:.2f} s"


def _resync(step: dict) -> str:
    r = step["noop_resync"]
    return (
        f"{r['seconds']:.2f} s, {r['writes']} writes, {r['calls'].get('list', 0)} lists, "
        f"{r.get('gets', 0)} gets, {r['queries']} queries"
    )


def _order(step: dict) -> str:
    o = step["order_to_active"]
    return f"{_ms(o['controller']['p50_s'])} / {_ms(o['controller']['p99_s'])}"


def _direct(step: dict) -> str:
    o = step["order_to_active"]
    d = o["direct_apply"]
    return (
        f"{_ms(d['p50_s'])} / {_ms(d['p99_s'])} ({d['objects_per_project']} objects); "
        f"ratio {o['ratio_p50']} / {o['ratio_p99']}"
    )


def _split(step: dict) -> str:
    t = step["order_to_active"].get("reconcile_task")
    if not t:
        return "—"
    return (
        f"{_ms(t['p50_s'])}: API {_ms(t['api_p50_s'])}, "
        f"database+Python {_ms(t['database_and_python_p50_s'])}"
    )


def _alloc(step: dict) -> str:
    a = step["allocation"]
    return (
        f"{a['claims_per_s']:,.0f} claims/s: {a['claims_new']:,} in {a['allocated_s']} s, "
        f"{a['allocation_lag_s']} s after the last was created"
    )


def _created(step: dict) -> str:
    a = step["allocation"]
    return f"{a['created_per_s']:,.0f}/s ({a['claims_created_s']} s)"


def _agent(step: dict) -> str:
    a = step["agent"]
    return f"{a['cpu_percent']:.2f} % ({a['pods_allocated']} pods allocated, no containers)"


def _publisher(step: dict) -> str:
    p = step["agent"]["fleet_publisher"]
    return f"{p['cpu_percent']:.2f} % for {p['nodes']} nodes ({p['rss_mib']:.0f} MiB)"


def _watcher(step: dict) -> str:
    w = step["watcher"]
    return f"{w['cpu_seconds']:.0f} s CPU, peak {w['peak_rss_mib']:.0f} MiB"


def _lost(step: dict) -> str:
    n = step["node_lost"]
    return (
        f"API {_s(n['pending_in_api_s'])}, portal {_s(n['shown_in_portal_s'])} "
        f"({n['pods_lost']} pods); back in {_s(n['recovered_s'])}"
    )


def _bulk(step: dict) -> str:
    b = step["bulk_buy"]
    done = _s(b["all_active_in_s"])
    return f"{b['orders']} orders: {_s(b['p50_s'])} / {_s(b['p99_s'])}, all in {done}"


ROWS: list[tuple[str, Callable[[dict], str], str]] = [
    ("order → active p50 / p99, fleet busy (30 resizes)", _order, "p99 ≤ 3 s"),
    ("same objects, one server-side apply each: p50 / p99; ratio", _direct, "ratio ≤ 1.5"),
    ("reconcile task p50 and where it goes", _split, ""),
    ("no-op resync of every project", _resync, "0 writes, ≤ 10 s"),
    ("claims allocated per second (pods made by the Deployments)", _alloc, ""),
    ("controller manager: claims created per second", _created, ""),
    ("bulk buy: every new tenant orders at once, p50 / p99", _bulk, ""),
    ("quota page p50 / p95, 50 clients", lambda s: _pages(s, "quota"), "p95 ≤ 100 ms"),
    ("live page p50 / p95, 50 clients", lambda s: _pages(s, "live"), "p95 ≤ 100 ms"),
    ("fan-out to the live page's viewers", _fanout, "≥ 2,000/s, lag p99 ≤ 1 s"),
    ("agent CPU (one core) at 32 containers", _agent, "≤ 1 %"),
    ("fleet publisher CPU", _publisher, ""),
    ("watcher CPU and peak RSS (cumulative)", _watcher, "RSS sub-linear"),
    ("node lost: replacements Pending (API), shown (portal)", _lost, ""),
]


def table(figures: dict) -> str:
    steps = figures["steps"]
    head = [
        f"{s['nodes']} nodes / {s['gpus']:,} GPUs / {s['tenants']} tenants / "
        f"{s['allocation']['claims_total']:,} slices"
        for s in steps
    ]
    lines = [
        "| figure | " + " | ".join(head) + " | goal |",
        "|---|" + "---|" * len(steps) + "---|",
    ]
    for name, fmt, goal in ROWS:
        lines.append(f"| {name} | " + " | ".join(fmt(s) for s in steps) + f" | {goal} |")
    return "\n".join(lines)


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS
    print(table(json.loads(path.read_text())))


if __name__ == "__main__":
    main()
