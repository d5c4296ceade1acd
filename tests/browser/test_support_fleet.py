"""The support console's fleet view in chromium, live: a node's agent reports a new slice over
/ws/agent/ and the slice appears under the right GPU within 3 s, without a reload."""

from __future__ import annotations

import json
import time

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from playwright.sync_api import expect
from websockets.sync.client import connect

from portal.agents import services
from tests.helpers.factories import make_world
from tests.helpers.observed import bind_pods
from tests.helpers.portal import serve_portal, signed_in_context

GIB = 1024**3
NODE = "kwok-gpu-0"
GPUS = [
    {"uuid": f"GPU-{i}", "name": "Tesla V100-PCIE-32GB", "memory_total_bytes": 32 * GIB,
     "memory_used_bytes": 0}
    for i in range(2)
]  # fmt: skip


def _frame(seq: int, pods: list[dict]) -> str:
    return json.dumps(
        {"type": "status", "node": NODE, "seq": seq, "ts": time.time(), "full": False,
         "dropped": 0, "gpus": GPUS, "pods": pods, "removed": []}
    )  # fmt: skip


def test_slice_appears_on_the_right_gpu_within_3_s(browser, transactional_db):
    world = make_world()
    ns = world.project_a.namespace
    token = services.issue_node_token(NODE)
    staff = get_user_model().objects.create_user("sam", password="x", is_staff=True)
    staff.groups.add(Group.objects.get_or_create(name="Support")[0])
    with serve_portal(connection.settings_dict["NAME"]) as portal:
        base = portal.http_base
        context = signed_in_context(browser, staff, base)
        try:
            headers = {"Authorization": f"Bearer {token}", "X-Tranche-Node": NODE, "Origin": base}
            with connect(portal.url, additional_headers=headers, open_timeout=10) as agent:
                agent.send(_frame(1, []))  # the node and its GPUs, no slices yet
                assert "ack" in json.loads(agent.recv(timeout=10)), portal.log_tail()
                page = context.new_page()
                page.goto("/support/")
                expect(page.locator("#fleet")).to_have_attribute("data-live", "true")
                gpu1 = page.locator('tr[data-gpu="GPU-1"]')
                expect(gpu1).to_contain_text("none")
                pod = {
                    "namespace": ns, "pod": "train-0", "uid": "uid-1", "gpu_uuid": "GPU-1",
                    "memory_limit_bytes": 8 * GIB, "memory_used_bytes": GIB,
                    "rejected_allocations": 0, "compute_target_percent": 25,
                    "compute_used_percent": 20.0, "throttled_seconds": 0.0, "processes": 1,
                }  # fmt: skip
                # the watcher's binding: the ingest accepts a pod only from the node it is on
                bind_pods(
                    world.project_a.pk,
                    {"train-0": {"phase": "Running", "reason": "", "node": NODE, "uid": "uid-1"}},
                )
                began = time.monotonic()
                agent.send(_frame(2, [pod]))
                assert "ack" in json.loads(agent.recv(timeout=10)), portal.log_tail()
                expect(gpu1).to_contain_text(f"{ns}/train-0: 8192 MiB, 25%", timeout=3000)
                elapsed = time.monotonic() - began
                print(f"slice on the fleet page {elapsed:.2f} s after the report")  # noqa: T201
                expect(page.locator('tr[data-gpu="GPU-0"]')).not_to_contain_text("train-0")
                expect(gpu1).to_contain_text("V100 8 GiB slice (25 %): 3")
        finally:
            context.close()
