"""The live page's chart and gauges for a real workload: the sample tenant image on the dev
cluster's real node (kubelet, containerd, runc; our DRA plugin and CDI spec), measured by the
interception core and reported by the real node agent streaming to real uvicorn.

The tenant's project is ordered and reconciled for real; the watcher (in-process, as
`controller.watch` runs it) binds the pod to its node; the pod allocates 1 GiB steps 5 s apart
(SAMPLE_ALLOC_STEP_MS). Within 30 s of the pod's creation its chart shows points with axes;
the memory gauge then moves as the workload allocates, and the chart's series grows with it.
Screenshots are kept under the test's tmp dir.
"""

from __future__ import annotations

import time

import pytest
from django.db import connection
from kubernetes import client
from playwright.sync_api import expect

from controller.reconcile import reconcile_project
from controller.watch import Watcher
from deploy.devcluster.config import load_node_settings, load_settings
from deploy.devcluster.node.render import node_paths
from portal.agents import services
from tests.cluster.nodeagent.conftest import describe_pod
from tests.helpers.portal import serve_portal, signed_in_context
from tests.helpers.realnode import agent_on_real_node, run_pod
from tests.helpers.skips import needs_native_sim
from tests.helpers.wait import wait_for

pytestmark = [needs_native_sim, pytest.mark.timeout(300)]
CLASS = "tranche-v100-8g"
ALLOC_MIB = 4096


def _gauge(page) -> float | None:
    value = page.locator('#pods tr[data-key$="/sample"] td[data-field="memory"] meter')
    text = value.get_attribute("value", timeout=1000) if value.count() else None
    return float(text) if text else None


def test_a_real_workloads_chart_appears_and_its_gauge_moves(
    browser, tenant, kube_cluster, tmp_path
) -> None:
    api = kube_cluster.api_client
    tenant.order(CLASS, 1)
    reconcile_project(tenant.project.pk)
    wait_for(
        lambda: client.ResourceV1Api(api)
        .list_namespaced_resource_claim_template(tenant.namespace).items,
        30, "the project's claim template",
    )  # fmt: skip
    node_name = node_paths(load_settings(), load_node_settings(), 0).name
    token_file = tmp_path / "agent.token"
    with serve_portal(connection.settings_dict["NAME"]) as portal:
        token_file.write_text(services.issue_node_token(node_name))
        stream = ("--portal", portal.url, "--token-file", str(token_file))
        watcher = Watcher(api, flush_interval=0.3)
        with agent_on_real_node(kube_cluster, *stream) as node:
            watcher.start()
            context = signed_in_context(browser, tenant.membership.user, portal.http_base)
            try:
                page = context.new_page()
                page.set_viewport_size({"width": 1280, "height": 900})
                page.goto(f"/projects/{tenant.project.pk}/status/")
                expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
                started = time.monotonic()
                growing = {"SAMPLE_ALLOC_MIB": str(ALLOC_MIB), "SAMPLE_ALLOC_STEP_MS": "5000"}
                run_pod(api, tenant.namespace, "sample", CLASS, node.name, env=growing)
                chart = page.locator('#charts figure[data-pod="sample"]')
                try:
                    expect(chart.locator(".uplot")).to_have_count(2, timeout=30_000)
                except AssertionError:
                    print(describe_pod(api, tenant.namespace, "sample") + node.log_tail())  # noqa: T201
                    print(portal.log_tail())  # noqa: T201
                    raise
                expect(chart.locator('.chart[data-kind="memory"] .u-axis')).to_have_count(2)
                appeared = time.monotonic() - started
                first = _gauge(page)
                page.screenshot(path=str(tmp_path / "real-first-report.png"), full_page=True)
                print(f"chart shown {appeared:.1f} s after the pod was created; gauge {first}")  # noqa: T201
                assert appeared < 30
                assert first is not None
                assert first < ALLOC_MIB, first
                moved = wait_for(
                    lambda: (v := _gauge(page)) is not None and v >= ALLOC_MIB and v, 60,
                    lambda: f"the gauge to reach {ALLOC_MIB} MiB (at {_gauge(page)})\n"
                    + node.log_tail(),
                )  # fmt: skip
                used = page.evaluate("window.trancheCharts.series('sample')")["memory_used"]
                assert used == sorted(used), used
                assert used[-1] >= ALLOC_MIB, used
                assert len(set(used)) >= 2, used  # the chart drew the growth, not one value
                compute = page.locator('#pods tr[data-key$="/sample"] td[data-field="compute"]')
                expect(compute.locator("meter")).to_have_count(1)
                page.screenshot(path=str(tmp_path / "real-allocated.png"), full_page=True)
                print(f"gauge moved from {first} to {moved} MiB")  # noqa: T201
            finally:
                context.close()
                watcher.close()
                client.CoreV1Api(api).delete_namespaced_pod(
                    "sample", tenant.namespace, grace_period_seconds=0
                )
