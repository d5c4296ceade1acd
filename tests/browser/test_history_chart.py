"""The history charts draw in chromium with the pod's real samples: three minutes of history
written earlier plus one report a node agent sends over /ws/agent/ to a real daphne give four
points on the pod's GPU-memory and compute lines, at the heights the samples say.

The charts are server-rendered SVG and are not redrawn live (status.js updates the tables only),
so the page is loaded after the agent's report; the live rows are covered by test_live_status."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection
from django.test import Client
from playwright.sync_api import expect
from websockets.sync.client import connect

from portal.agents import history, services
from portal.agents.bindings import write_pod_states
from portal.status.charts import HEIGHT
from tests.helpers.factories import make_world
from tests.helpers.portal import serve_portal

GIB = 1024**3
NODE = "kwok-gpu-0"
POD = "train-0"


def _points(polyline) -> list[tuple[float, float]]:
    raw = polyline.get_attribute("points").split()
    return [(float(x), float(y)) for x, y in (p.split(",") for p in raw)]


def test_chart_draws_the_pods_samples(browser, transactional_db):
    world = make_world()
    project, ns = world.project_a, world.project_a.namespace
    now = datetime.now(tz=UTC)
    # One sample in each of three minutes hours apart: each falls in its own chart bucket
    # whatever the bucket boundaries, so the pod's line has exactly one point per sample.
    history.record_samples(
        [
            history.Sample(project.pk, ns, POD, (now - timedelta(hours=h)).timestamp(),
                           used * GIB, 8 * GIB, float(10 * used), 50)
            for h, used in ((6, 1), (4, 2), (2, 3))
        ]
    )  # fmt: skip
    token = services.issue_node_token(NODE)
    write_pod_states(project.pk, {POD: {"phase": "Running", "reason": "", "node": NODE}})
    client = Client()
    client.force_login(world.viewer)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    with serve_portal(connection.settings_dict["NAME"]) as portal:
        base = portal.url.replace("ws://", "http://").removesuffix("/ws/agent/")
        frame = {
            "type": "status", "node": NODE, "seq": 1, "ts": time.time(), "full": False,
            "dropped": 0, "gpus": [], "removed": [],
            "pods": [{"namespace": ns, "pod": POD, "uid": "uid-1", "gpu_uuid": "GPU-1",
                      "memory_limit_bytes": 8 * GIB, "memory_used_bytes": 4 * GIB,
                      "rejected_allocations": 0, "compute_target_percent": 50,
                      "compute_used_percent": 40.0, "throttled_seconds": 0.0, "processes": 1}],
        }  # fmt: skip
        headers = {"Authorization": f"Bearer {token}", "X-Tranche-Node": NODE, "Origin": base}
        with connect(portal.url, additional_headers=headers, open_timeout=10) as agent:
            agent.send(json.dumps(frame))
            assert "ack" in json.loads(agent.recv(timeout=10)), portal.log_tail()
        context = browser.new_context(base_url=base)
        try:
            context.add_cookies(
                [{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": base}]
            )
            page = context.new_page()
            page.goto(f"/projects/{project.pk}/status/")
            expect(page.locator("#no-history")).to_have_count(0)
            figure = page.locator(f'figure.pod-chart[data-pod="{POD}"]')
            memory, compute = figure.locator("svg.chart").all()
            expect(memory).to_be_visible()
            expect(compute).to_be_visible()
            expect(memory.locator("title")).to_contain_text("GPU memory used / limit")
            expect(compute.locator("title")).to_contain_text("Compute used / target")
            # Used memory 1, 2, 3, 4 GiB of an 8 GiB limit; compute 10..40 % of a 50 % target.
            for svg, top, used in ((memory, 8, [1, 2, 3, 4]), (compute, 50, [10, 20, 30, 40])):
                line = _points(svg.locator("polyline.used"))
                limit = _points(svg.locator("polyline.limit"))
                assert len(line) == len(limit) == 4, (line, limit)
                xs = [x for x, _ in line]
                assert xs == sorted(xs)
                assert len(set(xs)) == 4
                assert [y for _, y in line] == [round(HEIGHT - HEIGHT * u / top, 1) for u in used]
                assert {y for _, y in limit} == {0.0}  # the limit/target is the top of the chart
            project_line = _points(
                page.locator("#project-chart svg.chart").first.locator("polyline.used")
            )
            assert [y for _, y in project_line] == [42.0, 36.0, 30.0, 24.0]
        finally:
            context.close()
