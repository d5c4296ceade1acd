"""A real Prometheus scrapes the stack (issue #33): the portal (daphne), a Celery worker
(prefork, multiprocess mode), the watcher, and the agent's collector over three slices of one
simulated V100 (25 % and 75 % burning, a third allocated and idle).

It checks what operators and tenants will read: each slice's busy ratio against its share and
their sum against NVML's utilisation; every family of docs/metrics.md's table scraped from its
process; every dashboard query answering; the series per pod bounded; the idle slice in ALERTS
(the rules file with a 5 s idle window) and not the busy ones; the run-rate priced by the
invoices' code."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from portal.cluster.models import ProjectUsage
from portal.orders.services import place_order
from tests.helpers.celery_worker import start_worker, stop_worker
from tests.helpers.portal import REPO, free_port, serve_portal
from tests.helpers.prometheus import run_prometheus
from tests.helpers.wait import wait_for
from tests.integration.metrics.table import documented
from tranche import pricing

pytestmark = pytest.mark.django_db(transaction=True)
MONITORING = REPO / "deploy" / "chart" / "tranche" / "monitoring"
IDLE_WINDOW = 5  # seconds, instead of the shipped 6 h
BUSY_WINDOW = "20s"
V8 = "tranche-v100-8g"
# Families with no series until their first event (test_metrics_table.py renders them)
EVENT_ONLY = {"tranche_gpu_health_events_total"}


def _rules(tmp: Path) -> Path:
    text = (MONITORING / "tranche.rules.yaml").read_text()
    assert "tranche_slice_idle_seconds >= 21600" in text
    path = tmp / "tranche.rules.yaml"
    path.write_text(text.replace("tranche_slice_idle_seconds >= 21600",
                                 f"tranche_slice_idle_seconds >= {IDLE_WINDOW}"))  # fmt: skip
    return path


def _dashboard_queries() -> list[str]:
    board = json.loads((MONITORING / "dashboard.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 8, "the dashboard lost its panels"
    return [e.replace("$__rate_interval", BUSY_WINDOW).replace("$namespace", "metrics")
            for e in exprs]  # fmt: skip


def _start(argv: list[str], env: dict, log: Path) -> subprocess.Popen:
    with log.open("ab") as out:
        return subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)


def test_a_real_prometheus_scrapes_the_stack(world, tmp_path):
    now = timezone.now()
    owner = world.membership(world.owner)
    product = world.products[V8]
    place_order(membership=owner, project=world.project_a, product=product, quantity=2,
                idempotency_key=secrets.token_hex(8), now=now)  # fmt: skip
    ProjectUsage.objects.create(project=world.project_a, product=product, allocated=2)
    db = connection.settings_dict["NAME"]
    env = dict(os.environ, TRANCHE_DEBUG="1", TRANCHE_DB_NAME=db, PYTHONPATH=str(REPO))
    kubeconfig = tmp_path / "kubeconfig"  # an API server nobody answers: nothing is reconciled
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": "https://127.0.0.1:9"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
        "users": [{"name": "x", "user": {"token": "x"}}]}))  # fmt: skip
    ports = {k: free_port() for k in ("agent", "worker", "watcher")}
    multiproc = tmp_path / "multiproc"
    multiproc.mkdir()
    os.environ.update(TRANCHE_CONTROLLER_METRICS_PORT=str(ports["worker"]),
                      PROMETHEUS_MULTIPROC_DIR=str(multiproc))  # fmt: skip
    procs = []
    try:
        worker = start_worker(f"metrics-{secrets.token_hex(3)}", kubeconfig,
                              tmp_path / "worker.log", concurrency=2)  # fmt: skip
    finally:
        os.environ.pop("TRANCHE_CONTROLLER_METRICS_PORT")
        os.environ.pop("PROMETHEUS_MULTIPROC_DIR")
    try:
        procs.append(_start([sys.executable, "-m", "controller.watch"],
                            dict(env, KUBECONFIG=str(kubeconfig),
                                 TRANCHE_WATCHER_METRICS_PORT=str(ports["watcher"])),
                            tmp_path / "watcher.log"))  # fmt: skip
        plan = ["a:25:2", "b:75:2", "c:25:0"]  # two burning slices of one card, one idle
        procs.append(_start([sys.executable, "-m", "tests.helpers.slice_agent",
                             str(tmp_path / "agent"), str(ports["agent"]), "120", *plan],
                            env, tmp_path / "agent.log"))  # fmt: skip
        with serve_portal(db) as portal:
            targets = {
                "tranche-agent": (f"127.0.0.1:{ports['agent']}", "/metrics"),
                "tranche-portal": (portal.http_base.removeprefix("http://"), "/metrics"),
                "tranche-business": (portal.http_base.removeprefix("http://"), "/metrics/business"),
                "tranche-controller": (f"127.0.0.1:{ports['worker']}", "/metrics"),
                "tranche-watcher": (f"127.0.0.1:{ports['watcher']}", "/metrics"),
            }
            with run_prometheus(tmp_path / "prom", targets, [_rules(tmp_path)]) as prom:
                _check(prom, product, now, tmp_path)
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=20)
        stop_worker(worker)


def _logs(tmp_path: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in tmp_path.glob("*.log"))


def _check(prom, product, now, tmp_path: Path) -> None:
    wait_for(lambda: set(prom.targets_up().values()) == {"up"}, 60,
             lambda: f"every target up: {prom.targets_up()}\n{_logs(tmp_path)}")  # fmt: skip
    busy = f"rate(tranche_slice_kernel_busy_seconds_total[{BUSY_WINDOW}])"
    # Rates over a window of steady burning: both burning slices have reported kernel time for
    # 30 s, the window the last 20 of them (the workloads' start, their first launches timed
    # synchronously, stays out of it). Counted from the slices' own busy reports, not from the
    # card's samples, so the window lies in steady burning by construction, however late the
    # workloads or the agent start.
    steady = (
        'count(count_over_time((tranche_slice_kernel_busy_seconds_total{claim=~"a|b"} > 0)'
        "[1m:1s]) >= 30) == 2"
    )
    wait_for(lambda: prom.query(steady), 120, "30 s of both burning slices' reports")
    ratios = prom.values(busy, "claim")
    nvml = prom.values(f"avg_over_time(tranche_gpu_utilization_ratio[{BUSY_WINDOW}])", "gpu_uuid")
    card = prom.values(f"sum by (gpu_uuid) ({busy})", "gpu_uuid")
    print(f"\nkernel-busy ratios {ratios}; their sum per card {card}; NVML {nvml}")  # noqa: T201
    assert abs(ratios["a"] - 0.25) <= 0.03, ratios
    assert abs(ratios["b"] - 0.75) <= 0.03, ratios
    assert ratios["c"] == 0.0, ratios
    assert card.keys() == nvml.keys()
    assert len(card) == 1
    for uuid, total in card.items():
        # On failure, the card's samples in the window: a sample short of 1 while the slices'
        # rates hold means the card ran less than the slices were charged for.
        samples = [v for r in prom.query(f"tranche_gpu_utilization_ratio[{BUSY_WINDOW}]")
                   for _t, v in r["values"]]  # fmt: skip
        assert abs(total - nvml[uuid]) <= 0.03, (card, nvml, samples)
    # Every family of the table was scraped from the process the table names.
    jobs = {"agent": "tranche-agent", "portal": "tranche-portal", "worker": "tranche-controller",
            "watcher": "tranche-watcher", "business": "tranche-business"}  # fmt: skip
    for name, row in documented().items():
        if name in EVENT_ONLY:
            continue
        series = f"{name}_count" if row.kind == "histogram" else name
        got = prom.query(f'count({series}{{job="{jobs[row.served_by]}"}})')
        assert got, f"{name} was not scraped from {row.served_by}"
    # Series per pod: bounded by the slice families (docs/metrics.md).
    per_pod = prom.values('count by (pod) ({__name__=~"tranche_slice_.+", pod!=""})', "pod")
    assert per_pod, "no slice series"
    assert max(per_pod.values()) <= 10, per_pod
    # The idle slice (c) fires its alert; the busy ones do not.
    wait_for(lambda: prom.query('ALERTS{alertname="TrancheSliceIdle",alertstate="firing"}'), 30,
             "the idle slice's alert")  # fmt: skip
    idle = {r["metric"]["claim"] for r in prom.query('ALERTS{alertname="TrancheSliceIdle"}')}
    assert idle == {"c"}, idle
    # The run-rate is the invoices' pricing: 2 slices at the order's price, per hour.
    rate = prom.values(f'tranche_product_revenue_per_hour{{product="{product.device_class}"}}',
                       "product")[product.device_class]  # fmt: skip
    assert abs(rate - float(pricing.hourly_rate(product.monthly_price, 2, now))) <= 0.01
    # Every dashboard panel's query answers with data.
    empty = [q for q in _dashboard_queries() if not prom.query(q)]
    assert not empty, f"dashboard queries without data: {empty}"
