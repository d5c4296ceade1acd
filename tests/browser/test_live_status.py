"""The live status page in chromium against real uvicorn (websockets need ASGI; pytest-django's
live_server is WSGI-only), the Redis channel layer and the test database: a pod reported by a
node agent over /ws/agent/ appears in the open page without a reload, then disappears; when the
server goes away the page says so and keeps retrying."""

from __future__ import annotations

import json
import time

from django.db import connection
from playwright.sync_api import expect
from websockets.sync.client import connect

from portal.agents import services
from tests.helpers.factories import make_world
from tests.helpers.observed import bind_pods
from tests.helpers.portal import serve_portal, signed_in_context

MIB = 1024 * 1024
NODE = "kwok-gpu-0"


def _frame(seq: int, namespace: str, pod: dict | None, removed: list | None = None) -> str:
    return json.dumps(
        {"type": "status", "node": NODE, "seq": seq, "ts": time.time(), "full": False,
         "dropped": 0, "gpus": [], "pods": [pod] if pod else [], "removed": removed or []}
    )  # fmt: skip


def test_row_appears_live_when_the_agent_reports(browser, transactional_db):
    world = make_world()
    ns = world.project_a.namespace
    token = services.issue_node_token(NODE)
    # Play the watcher: the cluster bound train-0 to this node (the portal checks it).
    bind_pods(world.project_a.pk, {"train-0": {"phase": "Running", "reason": "", "node": NODE}})
    contexts = []
    with serve_portal(connection.settings_dict["NAME"]) as portal:
        base = portal.http_base
        context = signed_in_context(browser, world.viewer, base)
        try:
            page = context.new_page()
            page.goto(f"/projects/{world.project_a.pk}/status/")
            expect(page.locator("#pods-empty")).to_be_visible()
            expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
            pod = {
                "namespace": ns, "pod": "train-0", "uid": "uid-1", "gpu_uuid": "GPU-1",
                "memory_limit_bytes": 8192 * MIB, "memory_used_bytes": 4096 * MIB,
                "rejected_allocations": 2, "compute_target_percent": 25,
                "compute_used_percent": 20.0, "throttled_seconds": 0.5, "processes": 1,
            }  # fmt: skip
            headers = {"Authorization": f"Bearer {token}", "X-Tranche-Node": NODE, "Origin": base}
            with connect(portal.url, additional_headers=headers, open_timeout=10) as agent:
                agent.send(_frame(1, ns, pod))
                assert "ack" in json.loads(agent.recv(timeout=10)), portal.log_tail()
                row = page.locator("#pods tr[data-key]", has_text="train-0")
                expect(row).to_contain_text("4096 / 8192 MiB (50%)")
                expect(row.locator('td[data-field="rejected"]')).to_have_text("2")
                expect(page.locator("#pods-empty")).to_be_hidden()
                agent.send(_frame(2, ns, None, [{"namespace": ns, "pod": "train-0"}]))
                assert "ack" in json.loads(agent.recv(timeout=10)), portal.log_tail()
                expect(row).to_have_count(0)
                expect(page.locator("#pods-empty")).to_be_visible()
        finally:
            contexts.append(context)
    try:  # daphne is stopped now: the page must say its figures may be stale, and retry
        expect(page.locator("#live-status")).to_have_attribute("data-state", "down")
        expect(page.locator("#live-status")).to_contain_text("Reconnecting")
    finally:
        for context in contexts:
            context.close()
