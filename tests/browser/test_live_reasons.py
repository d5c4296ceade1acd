"""The live page in chromium follows one pod through what the cluster says about it, without a
reload: Pending (capacity busy) → Running → OOMKilled. The facts enter the way the watcher hands
them to the portal (`record_namespace`), through the Redis channel layer to real uvicorn."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from django.db import connection, connections
from playwright.sync_api import expect

from portal.cluster.services import record_namespace
from tests.helpers.factories import make_world
from tests.helpers.observed import namespace_view
from tests.helpers.portal import serve_portal, signed_in_context
from tranche.pod_reasons import ContainerFacts, PodFacts

CLS = "tranche-v100-8g"
FULL = "0/2 nodes are available: 2 cannot allocate all claims."
OOM = ContainerFacts(
    "main", last_terminated_reason="OOMKilled", last_exit_code=137, memory_limit="512Mi"
)


def _cluster_says(project, pod: PodFacts) -> None:
    """Hand `pod` to the portal as the watcher does, from its own thread (playwright's loop runs
    in this one)."""

    def call() -> None:
        try:
            record_namespace(namespace_view(project.namespace, [pod], [], None))
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(call).result(timeout=30)


def test_pending_running_oomkilled_without_reload(browser, transactional_db):
    world = make_world()
    project = world.project_a

    def cluster_says(pod: PodFacts) -> None:
        _cluster_says(project, pod)

    with serve_portal(connection.settings_dict["NAME"]) as portal:
        base = portal.http_base
        context = signed_in_context(browser, world.viewer, base)
        try:
            page = context.new_page()
            page.goto(f"/projects/{project.pk}/status/")
            expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
            row = page.locator("#cluster-pods tr[data-key]", has_text="train")
            phase, reason = (
                row.locator('td[data-field="phase"]'),
                row.locator('td[data-field="reason"]'),
            )
            cluster_says(PodFacts("train", gpu_classes=(CLS,), unschedulable_message=FULL))
            expect(phase).to_have_text("Pending")
            expect(reason).to_contain_text("Capacity busy")
            expect(reason).to_contain_text("entitlement, not a reservation")
            cluster_says(PodFacts("train", phase="Running", gpu_classes=(CLS,)))
            expect(phase).to_have_text("Running")
            cluster_says(PodFacts("train", phase="Running", gpu_classes=(CLS,), containers=(OOM,)))
            expect(reason).to_contain_text("OOMKilled, exit code 137")
            expect(reason).to_contain_text("RAM limit of 512Mi")
        finally:
            context.close()


def test_pod_events_timeline_updates_without_reload(browser, transactional_db):
    """The pod's Warning events appear in its row as the watcher hands them over, newest first,
    as text (a message with markup is shown, not rendered)."""
    world = make_world()
    project = world.project_a

    def cluster_says(pod: PodFacts) -> None:
        _cluster_says(project, pod)

    pulled = ("2025-01-02T10:00:00Z", "Failed", "Failed to pull image <i>bad:ref</i>")
    backoff = ("2025-01-02T10:00:30Z", "BackOff", "Back-off pulling image bad:ref")
    with serve_portal(connection.settings_dict["NAME"]) as portal:
        context = signed_in_context(browser, world.viewer, portal.http_base)
        try:
            page = context.new_page()
            page.goto(f"/projects/{project.pk}/status/")
            expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
            row = page.locator("#cluster-pods tr[data-key]", has_text="train")
            events = row.locator('td[data-field="events"]')
            summary = events.locator(".cell-text")
            raw = events.locator("details pre.raw")
            cluster_says(PodFacts("train", timeline=(pulled,)))
            expect(summary).to_have_text(
                "A container could not start (often the image) (Failed), once, "
                "last at 2 Jan 2025, 10:00 UTC"
            )
            expect(raw).to_be_hidden()  # behind the "Details" toggle
            events.locator("summary").click()
            expect(raw).to_have_text(
                "2025-01-02T10:00:00Z Failed: Failed to pull image <i>bad:ref</i>"
            )
            expect(events.locator("i")).to_have_count(0)  # text, never markup
            cluster_says(PodFacts("train", timeline=(pulled, backoff)))
            expect(summary).to_contain_text(
                "The container keeps stopping and is restarted with a growing delay (BackOff), "
                "once, last at 2 Jan 2025, 10:00 UTC\nA container could not start"
            )
            expect(events.locator("details pre.raw")).to_contain_text(
                "2025-01-02T10:00:30Z BackOff: Back-off pulling image bad:ref\n"
                "2025-01-02T10:00:00Z Failed"
            )
            # once the pod runs, its warnings are cleared
            cluster_says(PodFacts("train", phase="Running", timeline=(pulled, backoff)))
            expect(summary).to_have_text("")
            expect(events.locator("details")).to_have_count(0)
        finally:
            context.close()


def test_a_pull_error_shows_whole_and_wraps_in_its_cell(browser, transactional_db, tmp_path):
    """Issue #49: the pull error was cut mid-word. containerd's long answer, with its unbroken
    image reference and URL, shows whole and wraps inside the column at a laptop's width."""
    world = make_world()
    project = world.project_a
    url = "https://registry-1.docker.io/v2/tenant-team/very-long-image-name-for-a-model/" + (
        "manifests/sha256:" + "0123456789abcdef" * 4
    )
    message = (
        'failed to pull and unpack image "docker.io/tenant-team/very-long-image-name:1.0": '
        f'failed to resolve reference: failed to do request: Head "{url}": dial tcp: lookup '
        "registry-1.docker.io on 10.96.0.10:53: read udp 10.244.0.7:40182->10.96.0.10:53: i/o "
        "timeout"
    )
    waiting = ContainerFacts("llm", waiting_reason="ErrImagePull", waiting_message=message)
    with serve_portal(connection.settings_dict["NAME"]) as portal:
        context = signed_in_context(browser, world.viewer, portal.http_base)
        try:
            page = context.new_page()
            page.set_viewport_size({"width": 1024, "height": 800})
            page.goto(f"/projects/{project.pk}/status/")
            expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
            _cluster_says(project, PodFacts("llm-0", phase="Pending", containers=(waiting,)))
            row = page.locator("#cluster-pods tr[data-key]", has_text="llm-0")
            cell = row.locator('td[data-field="reason"]')
            expect(cell).to_contain_text(f"(ErrImagePull: {message}).")
            page.screenshot(path=str(tmp_path / "pull-error.png"), full_page=True)
            box = page.evaluate(
                """() => { const t = document.getElementById('cluster-pods');
                           const w = t.closest('.table-wrap');
                           return [t.scrollWidth, w.clientWidth]; }"""
            )
            assert box[0] <= box[1], f"the table is {box[0]} px wide in a {box[1]} px column"
        finally:
            context.close()
