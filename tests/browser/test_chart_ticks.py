"""The live page's time axes are readable at every span (issue #49): a pod seen for one minute
got five "00:00" ticks (uPlot ranged one point over years), a pod's first seconds got repeated
half-second labels, and "HH:MM:SS" labels ran into each other. In chromium against real
uvicorn, for a one-minute pod, a 20-minute one, a day-long one, the project, and a pod whose
only point is the report that just arrived: every tick label differs from its neighbours, the
step matches the label's precision, and each label fits in the gap to the next one.

The labels are drawn on a canvas; `trancheCharts.ticks` reads what the axis drew, with each
label's position and width in CSS pixels."""

from __future__ import annotations

import itertools
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
NODE = "kwok-gpu-0"
GAP_PX = 4  # the least white space between two labels


def _history(project, ns: str, pod: str, now: datetime, minutes_ago: list[int]) -> None:
    history.record_samples([
        history.Sample(project.pk, ns, pod, (now - timedelta(minutes=m)).timestamp(), GIB,
                       8 * GIB, 10.0, 25)
        for m in minutes_ago
    ])  # fmt: skip


def _report(ns: str) -> str:
    gpus = [{"uuid": "GPU-1", "name": "Tesla V100-PCIE-32GB", "memory_total_bytes": 32 * GIB,
             "memory_used_bytes": 0}]  # fmt: skip
    pod = {"namespace": ns, "pod": "new-0", "uid": "uid-new-0", "gpu_uuid": "GPU-1",
           "memory_limit_bytes": 8 * GIB, "memory_used_bytes": GIB, "rejected_allocations": 0,
           "compute_target_percent": 25, "compute_used_percent": 5.0, "throttled_seconds": 0.0,
           "processes": 1}  # fmt: skip
    return json.dumps({"type": "status", "node": NODE, "seq": 1, "ts": time.time(),
                       "full": False, "dropped": 0, "gpus": gpus, "pods": [pod],
                       "removed": []})  # fmt: skip


def _assert_readable(ticks: list[dict], where: str) -> None:
    labels = [t["label"] for t in ticks]
    assert len(ticks) >= 2, f"{where}: {labels}"
    assert all(a != b for a, b in itertools.pairwise(labels)), f"{where}: {labels}"
    for a, b in itertools.pairwise(ticks):
        room = b["x"] - a["x"]
        need = (a["width"] + b["width"]) / 2 + GAP_PX
        assert room >= need, f"{where}: {a['label']!r} and {b['label']!r} {room:.0f} px apart"


def test_time_axes_are_readable_at_every_span(browser, transactional_db, tmp_path):
    world = make_world()
    project, ns = world.project_a, world.project_a.namespace
    now = datetime.now(tz=UTC)
    _history(project, ns, "short-0", now, [50])  # seen for one minute
    _history(project, ns, "hour-0", now, list(range(40, 20, -1)))  # twenty minutes
    _history(project, ns, "day-0", now, list(range(23 * 60, 0, -15)))  # the whole day
    token = services.issue_node_token(NODE)
    bind_pods(project.pk, {"new-0": {"phase": "Running", "reason": "", "node": NODE}})
    with serve_portal(connection.settings_dict["NAME"]) as portal:
        context = signed_in_context(browser, world.viewer, portal.http_base)
        try:
            page = context.new_page()
            page.set_viewport_size({"width": 1280, "height": 900})
            page.goto(f"/projects/{project.pk}/status/")
            expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
            headers = {"Authorization": f"Bearer {token}", "X-Tranche-Node": NODE,
                       "Origin": portal.http_base}  # fmt: skip
            with connect(portal.url, additional_headers=headers, open_timeout=10) as agent:
                agent.send(_report(ns))
                assert "ack" in json.loads(agent.recv(timeout=10)), portal.log_tail()
            new = page.locator('#charts figure[data-pod="new-0"]')
            expect(new.locator(".uplot")).to_have_count(2, timeout=30_000)
            page.locator("#gone-charts summary").click()  # the pods seen earlier, folded away
            expect(page.locator('#gone-charts figure[data-pod="short-0"]')).to_be_visible()
            page.screenshot(path=str(tmp_path / "ticks.png"), full_page=True)
            for pod in ("short-0", "hour-0", "day-0", "", "new-0"):
                for kind in ("memory", "compute"):
                    ticks = page.evaluate(
                        "([p, k]) => window.trancheCharts.ticks(p, k)", [pod, kind]
                    )
                    _assert_readable(ticks, f"{pod or 'project'} {kind}")
            short = [
                t["label"] for t in page.evaluate("window.trancheCharts.ticks('short-0', 'memory')")
            ]
            assert all(len(label) == len("00:00:00") for label in short), short  # 30 s steps
        finally:
            context.close()
