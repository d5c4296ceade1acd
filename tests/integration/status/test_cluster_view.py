"""What the watcher hands the portal (`record_namespace`) reaches the live page through the
real ASGI stack, the Redis channel layer and PostgreSQL: one pod going Pending (capacity busy) →
Running → OOMKilled → gone, without a reload; rows stay bounded; CPU/RAM used come from the
ResourceQuota status."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async

from portal.cluster.models import MAX_ROWS_PER_PROJECT, PodState, QuotaUse
from portal.cluster.services import record_namespace
from tests.helpers.factories import make_world
from tests.helpers.observed import namespace_view
from tests.integration.status.test_status_socket import _watch
from tranche.pod_reasons import ContainerFacts, PodFacts

pytestmark = pytest.mark.django_db(transaction=True)
CLS = "tranche-v100-8g"
FULL = "0/2 nodes are available: 2 cannot allocate all claims."
OOM = ContainerFacts(
    "main", last_terminated_reason="OOMKilled", last_exit_code=137, memory_limit="512Mi"
)


@pytest.fixture
def world(transactional_db):
    return make_world()


def test_live_page_follows_a_pod_from_pending_to_oomkilled(world):
    project, ns = world.project_a, world.project_a.namespace
    steps = [
        [PodFacts("train", gpu_classes=(CLS,), unschedulable_message=FULL)],
        [PodFacts("train", phase="Running", gpu_classes=(CLS,))],
        [PodFacts("train", phase="Running", gpu_classes=(CLS,), containers=(OOM,))],
        [],
    ]

    def record(pods):
        return record_namespace(namespace_view(ns, pods, [], None))

    async def scenario() -> list[dict]:
        page = await _watch(world.member, project.pk)
        got = [await page.receive_json_from(timeout=5)]
        for pods in steps:
            await database_sync_to_async(record)(pods)
            got.append(await page.receive_json_from(timeout=5))
        await page.disconnect()
        return got

    snapshot, pending, running, oom, gone = asyncio.run(scenario())
    assert snapshot == {"type": "snapshot", "rows": []}
    assert pending["type"] == "cluster-row"
    assert pending["key"] == f"{ns}/train"
    assert pending["cells"]["phase"] == "Pending"
    assert "Capacity busy" in pending["cells"]["reason"]
    assert "entitlement, not a reservation" in pending["cells"]["reason"]
    assert running["cells"]["phase"] == "Running"
    assert running["reason"] == "Running"
    assert oom["reason"] == "OOMKilled"
    assert "RAM limit of 512Mi" in oom["cells"]["reason"]
    assert "exit code 137" in oom["cells"]["reason"]
    assert gone == {"type": "cluster-remove", "key": f"{ns}/train"}


def test_rows_are_bounded_and_unchanged_facts_write_nothing(world):
    project, ns = world.project_a, world.project_a.namespace
    pods = [PodFacts(f"p-{i:04d}", phase="Running") for i in range(MAX_ROWS_PER_PROJECT + 100)]
    record_namespace(namespace_view(ns, pods, [], None))
    assert PodState.objects.filter(project=project).count() == MAX_ROWS_PER_PROJECT
    stamp = PodState.objects.filter(project=project).order_by("-updated_at").first().updated_at
    record_namespace(namespace_view(ns, pods, [], None))
    newest = PodState.objects.filter(project=project).order_by("-updated_at").first().updated_at
    assert newest == stamp, "storing the same facts again must not rewrite rows"


def test_quota_status_feeds_cpu_and_memory_used(world):
    project, ns = world.project_a, world.project_a.namespace
    assert not QuotaUse.objects.filter(project=project).exists()
    quota = {"hard": {"requests.cpu": "8"}, "used": {"requests.cpu": "0", "requests.memory": "0"}}
    record_namespace(namespace_view(ns, [], [], quota))
    used = QuotaUse.objects.get(project=project)
    assert (used.cpu_used_millicores, used.memory_used_mib) == (0, 0)
    quota["used"] = {"requests.cpu": "7500m", "requests.memory": "3Gi"}
    record_namespace(namespace_view(ns, [], [], quota))
    used = QuotaUse.objects.get(project=project)
    assert (used.cpu_used_millicores, used.memory_used_mib) == (7500, 3072)


def test_pod_events_timeline_is_shown_as_text_live_and_on_load(world):
    """Data written is data shown: the watcher's Warning events of a pod reach the open page's
    row and the page as loaded as one line per reason in the tenant's words (count, last
    time), the most recent first, and as Kubernetes wrote them behind "Details", markup kept as
    text."""
    from django.test import Client
    from django.urls import reverse

    project, ns = world.project_a, world.project_a.namespace
    timeline = (
        ("2025-01-02T10:00:00Z", "FailedScheduling", "0/2 nodes are available"),
        ("2025-01-02T10:01:00Z", "FailedScheduling", "0/3 nodes are available"),
        ("2025-01-02T10:05:00Z", "BackOff", "Back-off pulling image <b>bad:ref</b>"),
    )
    pod = PodFacts("train", gpu_classes=(CLS,), unschedulable_message=FULL, timeline=timeline)

    def record():
        return record_namespace(namespace_view(ns, [pod], [], None))

    async def scenario() -> dict:
        page = await _watch(world.member, project.pk)
        await page.receive_json_from(timeout=5)
        await database_sync_to_async(record)()
        row = await page.receive_json_from(timeout=5)
        await page.disconnect()
        return row

    row = asyncio.run(scenario())
    assert row["cells"]["events"] == (
        "The container keeps stopping and is restarted with a growing delay (BackOff), once, "
        "last at 2 Jan 2025, 10:05 UTC\n"
        "No node could take the pod yet (FailedScheduling), 2 times, last at 2 Jan 2025, 10:01 UTC"
    )
    assert row["raw"] == (
        "2025-01-02T10:05:00Z BackOff: Back-off pulling image <b>bad:ref</b>\n"
        "2025-01-02T10:01:00Z FailedScheduling: 0/3 nodes are available\n"
        "2025-01-02T10:00:00Z FailedScheduling: 0/2 nodes are available"
    )
    assert PodState.objects.get(namespace=ns, name="train").events == [list(e) for e in timeline]
    client = Client()
    client.force_login(world.member)
    html = client.get(reverse("project_status", args=[project.pk])).content.decode()
    assert "No node could take the pod yet (FailedScheduling), 2 times" in html
    assert "<summary>Details</summary>" in html
    assert "2025-01-02T10:05:00Z BackOff: Back-off pulling image &lt;b&gt;bad:ref&lt;/b&gt;" in html
    assert "<b>bad:ref</b>" not in html
    assert '<th scope="col" data-field="events">Recent warnings</th>' in html
    # bounded: only the last EVENTS_SHOWN events are kept, each message cut to its column
    many = tuple((f"T{i:02d}", "BackOff", "m" * 1000) for i in range(25))
    pod = PodFacts("train", gpu_classes=(CLS,), unschedulable_message=FULL, timeline=many)
    record()
    stored = PodState.objects.get(namespace=ns, name="train").events
    assert [e[0] for e in stored] == [f"T{i:02d}" for i in range(15, 25)]
    assert {len(e[2]) for e in stored} == {300}
    assert all(e[2].endswith("…") for e in stored)
    # cut at a word, never mid-word; and the pod's warnings are cleared once it runs
    words = ("word " * 100).strip()
    pod = PodFacts("train", gpu_classes=(CLS,), unschedulable_message=FULL,
                   timeline=(("T", "BackOff", words),))  # fmt: skip
    record()
    (stored_event,) = PodState.objects.get(namespace=ns, name="train").events
    assert stored_event[2].endswith("word…")
    assert len(stored_event[2]) <= 300
    pod = PodFacts(
        "train", phase="Running", gpu_classes=(CLS,), timeline=(("T", "BackOff", words),)
    )
    record()
    assert PodState.objects.get(namespace=ns, name="train").events == []
