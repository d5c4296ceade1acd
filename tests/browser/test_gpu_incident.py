"""A failed GPU in chromium (issue #34): the agent's frame over /ws/agent/ says the GPU under
a tenant's pod failed (XID 79); the tenant's open live page shows "the GPU your pod ran on
failed (XID 79, hh:mm:ss UTC); Kubernetes moves your pod ..." within 5 s, then the replacement
pod's new placement (another GPU) in its slices table; the support console, open meanwhile,
lists the GPU in its unhealthy-GPU table (node, XID, the pod) without a reload, and its "Mark
in service" button marks it (audited)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

from django.db import connection
from playwright.sync_api import expect
from websockets.sync.client import connect

from nodeagent.checkpoint import PreparedClaim, PreparedDevice
from nodeagent.health import HealthEvent
from nodeagent.health_findings import findings_for
from nodeagent.xid import Severity
from portal.agents import services
from portal.audit.models import AuditLog
from portal.cluster.models import UsageRecord
from tests.helpers.factories import make_staff, make_world
from tests.helpers.observed import bind_pods
from tests.helpers.portal import serve_portal, signed_in_context

GIB = 1024**3
NODE = "kwok-gpu-0"
GPUS = [
    {"uuid": f"GPU-{i}", "name": "Tesla V100-PCIE-32GB", "memory_total_bytes": 32 * GIB,
     "memory_used_bytes": 0}
    for i in range(2)
]  # fmt: skip


def _pod(ns: str, name: str, gpu: str) -> dict:
    return {
        "namespace": ns, "pod": name, "uid": f"uid-{name}", "gpu_uuid": gpu,
        "memory_limit_bytes": 8 * GIB, "memory_used_bytes": GIB, "rejected_allocations": 0,
        "compute_target_percent": 25, "compute_used_percent": 20.0, "throttled_seconds": 0.0,
        "processes": 1,
    }  # fmt: skip


def _frame(seq: int, pods: list[dict], removed=(), findings=()) -> str:
    return json.dumps(
        {"type": "status", "node": NODE, "seq": seq, "ts": time.time(), "full": False,
         "dropped": 0, "gpus": GPUS, "pods": pods, "removed": list(removed),
         "findings": list(findings)}
    )  # fmt: skip


def _send(agent, frame: str, portal) -> None:
    agent.send(frame)
    assert "ack" in json.loads(agent.recv(timeout=10)), portal.log_tail()


def test_the_tenant_is_told_and_support_lists_the_gpu(browser, transactional_db):
    world = make_world()
    project, ns = world.project_a, world.project_a.namespace
    token = services.issue_node_token(NODE)
    support = make_staff("sue", "Support")
    bind_pods(project.pk, {"llm-a": {"phase": "Running", "reason": "", "node": NODE,
                                            "uid": "uid-llm-a"}})  # fmt: skip
    # The pod's claim, allocated on the node (the watcher's ledger): the ingest believes a
    # node's health findings only about pods bound to it that hold claims there (issue #45).
    UsageRecord.objects.create(
        claim_uid="c-a", claim_name="llm-a-gpu", organization=project.organization,
        project=project, product=next(iter(world.products.values())), node=NODE,
        device="gpu-0", allocated_at=datetime.now(UTC) - timedelta(hours=1), opened_by="event",
    )  # fmt: skip
    with serve_portal(connection.settings_dict["NAME"]) as portal:
        base = portal.http_base
        tenant_ctx = signed_in_context(browser, world.owner, base)
        support_ctx = signed_in_context(browser, support, base)
        try:
            headers = {"Authorization": f"Bearer {token}", "X-Tranche-Node": NODE, "Origin": base}
            with connect(portal.url, additional_headers=headers, open_timeout=10) as agent:
                _send(agent, _frame(1, [_pod(ns, "llm-a", "GPU-0")]), portal)
                live = tenant_ctx.new_page()
                live.goto(f"/projects/{project.pk}/status/")
                expect(live.locator("#live-status")).to_have_attribute("data-state", "live")
                expect(live.locator("#gpu-incidents")).to_be_hidden()
                console = support_ctx.new_page()
                console.goto("/support/")
                expect(console.locator("#fleet")).to_have_attribute("data-live", "true")
                expect(console.locator("#unhealthy-gpus")).to_contain_text("Every GPU is healthy.")

                dev = PreparedDevice("gpu", NODE, "gpu-0", "GPU-0", "", 8 << 30, 25, "")
                claim = PreparedClaim(uid="c-a", namespace=ns, name="llm-a-gpu", devices=(dev,),
                                      config_path="", cdi_path="", region_dir="",
                                      pods=(f"{ns}/llm-a/uid-llm-a",))  # fmt: skip
                failed = HealthEvent(time.time(), "GPU-0", Severity.FATAL,
                                     "GPU has fallen off the bus", 79)  # fmt: skip
                findings = [
                    {"kind": k, "ts": failed.ts, "namespace": n, "subject": s, "detail": d, **x}
                    for k, n, s, d, x in findings_for(failed, NODE, [claim], lambda pid: None)
                ]
                removed = [{"namespace": ns, "pod": "llm-a"}]
                began = time.monotonic()
                _send(agent, _frame(2, [], removed, findings), portal)
                hhmm = datetime.fromtimestamp(failed.ts, UTC).strftime("%H:%M")
                line = live.locator('#gpu-events li[data-kind="pod-gpu-failed"]')
                expect(line).to_contain_text("the GPU your pod ran on failed (XID 79", timeout=5000)
                told = time.monotonic() - began
                expect(line).to_contain_text(f"{hhmm}:")  # when, in UTC
                expect(line).to_contain_text("Kubernetes moves your pod to a healthy GPU")
                expect(line).to_contain_text("llm-a")
                row = console.locator('tr[data-unhealthy-gpu="GPU-0"]')
                expect(row).to_contain_text("79", timeout=5000)
                listed = time.monotonic() - began
                expect(row).to_contain_text(NODE)
                expect(row).to_contain_text(f"{ns}/llm-a")

                # Kubernetes' replacement pod, on the other GPU: its new placement on the page
                moved = {"phase": "Running", "reason": "", "node": NODE, "uid": "uid-llm-b"}
                bind_pods(project.pk, {"llm-b": moved})
                _send(agent, _frame(3, [_pod(ns, "llm-b", "GPU-1")]), portal)
                placed = live.locator("#pods tr", has_text="llm-b")
                expect(placed.locator('td[data-field="gpu"]')).to_contain_text("GPU-1")
                expect(placed.locator('td[data-field="node"]')).to_contain_text(NODE)
                print(  # noqa: T201
                    f"\nlive page told {told:.2f} s, support console listed the GPU "
                    f"{listed:.2f} s after the agent's frame"
                )

                row.get_by_role("button", name="Mark in service").click()
                expect(console.locator(".messages")).to_contain_text(
                    "GPU GPU-0 on kwok-gpu-0 is back in service"
                )
            assert AuditLog.objects.filter(action="gpu.in_service", actor=support).count() == 1
        finally:
            tenant_ctx.close()
            support_ctx.close()
