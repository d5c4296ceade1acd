"""The live page's charts (uPlot, vendored) in chromium against real uvicorn: a pod's history
and its agent's reports become points with axes, units and hover values; a new pod's chart
appears with its first report, grows with each one, and its memory bar moves when the
workload allocates; a pod its node stops reporting has its chart folded away.

History written earlier plays the database's past; the reports come from a node agent's
websocket (/ws/agent/), as a real agent sends them. Screenshots are kept under the test's
tmp dir."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

from django.db import connection
from playwright.sync_api import expect
from websockets.sync.client import connect

from portal.agents import history, services
from tests.helpers.factories import make_world
from tests.helpers.observed import bind_pods
from tests.helpers.portal import serve_portal, signed_in_context

GIB = 1024**3
MIB = 1024**2
NODE = "kwok-gpu-0"
GPUS = [{"uuid": "GPU-1", "name": "Tesla V100-PCIE-32GB", "memory_total_bytes": 32 * GIB,
         "memory_used_bytes": 0}]  # fmt: skip


def _frame(seq: int, ns: str, pods: list[dict], removed: list | None = None) -> str:
    return json.dumps(
        {"type": "status", "node": NODE, "seq": seq, "ts": time.time(), "full": False,
         "dropped": 0, "gpus": GPUS, "pods": pods, "removed": removed or []}
    )  # fmt: skip


def _pod(ns: str, name: str, used_gib: float, compute: float) -> dict:
    return {"namespace": ns, "pod": name, "uid": f"uid-{name}", "gpu_uuid": "GPU-1",
            "memory_limit_bytes": 8 * GIB, "memory_used_bytes": int(used_gib * GIB),
            "rejected_allocations": 0, "compute_target_percent": 25,
            "compute_used_percent": compute, "throttled_seconds": 0.0, "processes": 1}  # fmt: skip


def _send(agent, portal, frame: str) -> None:
    agent.send(frame)
    assert "ack" in json.loads(agent.recv(timeout=10)), portal.log_tail()


def test_charts_show_history_and_grow_live(browser, transactional_db, tmp_path):
    world = make_world()
    project, ns = world.project_a, world.project_a.namespace
    now = datetime.now(tz=UTC)
    # train-0 ran for hours (three 15-minute buckets) and in the last hour (three minutes).
    history.record_samples(
        [
            history.Sample(project.pk, ns, "train-0", (now - timedelta(minutes=m)).timestamp(),
                           used * GIB, 8 * GIB, float(5 * used), 25)
            for m, used in ((360, 1), (240, 2), (120, 3), (30, 4), (20, 5), (10, 6))
        ]
    )  # fmt: skip
    token = services.issue_node_token(NODE)
    bound = {n: {"phase": "Running", "reason": "", "node": NODE} for n in ("train-0", "new-0")}
    bind_pods(project.pk, bound)
    with serve_portal(connection.settings_dict["NAME"]) as portal:
        headers = {"Authorization": f"Bearer {token}", "X-Tranche-Node": NODE,
                   "Origin": portal.http_base}  # fmt: skip
        with connect(portal.url, additional_headers=headers, open_timeout=10) as agent:
            _send(agent, portal, _frame(1, ns, [_pod(ns, "train-0", 7, 20.0)]))
        context = signed_in_context(browser, world.viewer, portal.http_base)
        try:
            page = context.new_page()
            csp: list[str] = []  # uPlot and the page's scripts run under the portal's CSP
            page.on(
                "console", lambda m: csp.append(m.text) if "Security Policy" in m.text else None
            )
            page.set_viewport_size({"width": 1280, "height": 900})
            page.goto(f"/projects/{project.pk}/status/")
            expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
            old = page.locator('#charts figure[data-pod="train-0"]')
            # two charts (memory, compute), each with its axes' labels and a legend
            expect(old.locator(".uplot")).to_have_count(2)
            memory = old.locator('.chart[data-kind="memory"]')
            expect(memory.locator(".u-axis")).to_have_count(2)
            expect(memory.locator(".u-legend")).to_contain_text("Slice limit")
            expect(memory.locator(".u-legend")).to_contain_text("GPU memory used")
            shown = page.evaluate("window.trancheCharts.series('train-0')")
            # the six samples of its history, then the report's minute (and the live row)
            assert shown["memory_used"][:6] == [1024.0, 2048.0, 3072.0, 4096.0, 5120.0, 6144.0]
            assert set(shown["memory_used"][6:]) == {7168.0}
            assert set(shown["memory_limit"]) == {8192.0}
            assert set(shown["compute_target"]) == {25.0}
            assert shown["t"] == sorted(shown["t"])
            # the last hour is per minute: its three samples are 10 minutes apart
            assert [b - a for a, b in zip(shown["t"][3:5], shown["t"][4:6], strict=True)] == [
                600,
                600,
            ]
            # hover values: pointing at the chart's plot shows the values with units
            memory.locator(".u-over").hover()
            expect(memory.locator(".u-legend .u-value").nth(2)).to_contain_text("GiB")
            with connect(portal.url, additional_headers=headers, open_timeout=10) as agent:
                started = time.monotonic()
                _send(agent, portal, _frame(2, ns, [_pod(ns, "new-0", 1, 5.0)]))
                new = page.locator('#charts figure[data-pod="new-0"]')
                expect(new.locator(".uplot")).to_have_count(2, timeout=30_000)
                expect(new.locator('.chart[data-kind="memory"] .u-axis')).to_have_count(2)
                expect(new).to_have_attribute("data-points", "1")
                assert time.monotonic() - started < 30
                row = page.locator('#pods tr[data-key$="/new-0"]')
                gauge = row.locator('td[data-field="memory"] meter')
                expect(gauge).to_have_attribute("value", "1024")
                expect(row.locator('td[data-field="gpu"]')).to_contain_text(
                    "Tesla V100-PCIE-32GB · 8 GiB slice · 25 %"
                )
                page.screenshot(path=str(tmp_path / "live-first-report.png"), full_page=True)
                time.sleep(0.01)  # the next report's agent clock must be later than the first
                _send(agent, portal, _frame(3, ns, [_pod(ns, "new-0", 6, 24.0)]))
                expect(gauge).to_have_attribute("value", "6144")
                expect(row.locator('td[data-field="compute"] meter')).to_have_attribute(
                    "value", "24"
                )
                expect(new).to_have_attribute("data-points", "2")
                assert page.evaluate("window.trancheCharts.series('new-0')")["memory_used"] == [
                    1024.0,
                    6144.0,
                ]
                page.screenshot(path=str(tmp_path / "live-allocated.png"), full_page=True)
                _send(agent, portal, _frame(4, ns, [], [{"namespace": ns, "pod": "new-0"}]))
                expect(page.locator('#gone-charts figure[data-pod="new-0"]')).to_have_count(1)
                expect(page.locator("#gone-charts")).to_be_visible()
                expect(page.locator("#gone-count")).to_have_text("1")
                expect(page.locator('#charts figure[data-pod="new-0"]')).to_have_count(0)
            assert csp == []
        finally:
            context.close()
