"""Slice outages move from billing to the cluster's observations: each outage keeps its slice,
times and replacement, and takes its GPU, node and XID from the health event that opened it;
billing staff keep seeing them and billing credits the same downtime afterwards."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.helpers.factories import make_world

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = [
    ("billing", "0009_outage_belongs_to_the_claim"),
    ("cluster", "0003_checkpoint_time_nobody_reads"),
]
T0 = datetime(2026, 11, 2, 9, 0, 0, tzinfo=UTC)
GPU = "GPU-51a1a7ed-0000-4000-8000-000000000000"


def _migrate(targets) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor


def test_outages_survive_the_move_with_their_gpu_and_xid() -> None:
    world = make_world()
    project, product = world.project_a, world.products["tranche-v100-16g"]
    for name in ("Billing", "Support"):  # an earlier transactional test's flush dropped them
        Group.objects.get_or_create(name=name)
    executor = _migrate(BEFORE)
    try:
        old = executor.loader.project_state(BEFORE).apps
        record = old.get_model("cluster", "UsageRecord").objects.create(
            claim_uid="uid-0", claim_name="llm-gpu", organization_id=project.organization_id,
            project_id=project.pk, product_id=product.pk, node="real-gpu-0", device="gpu-0",
            allocated_at=T0 - timedelta(hours=1), opened_by="event",
        )  # fmt: skip
        event = old.get_model("agents", "GpuHealthEvent").objects.create(
            node_name="real-gpu-0", gpu_uuid=GPU, kind="pod-gpu-failed", xid=79,
            project_id=project.pk, namespace=project.namespace, pod_name="llm-0",
            detail="the GPU your pod ran on failed", occurred_at=T0,
        )  # fmt: skip
        old.get_model("billing", "SliceOutage").objects.create(
            health_event_id=event.pk, usage_record_id=record.pk,
            organization_id=project.organization_id, project_id=project.pk,
            product_id=product.pk, pod_name="llm-0", started_at=T0,
            ended_at=T0 + timedelta(seconds=42), replacement_pod="llm-1",
        )  # fmt: skip
    finally:
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    from portal.cluster.models import SliceOutage

    (moved,) = SliceOutage.objects.values(
        "usage_record__claim_uid", "pod_name", "node", "gpu_uuid", "xid", "started_at",
        "ended_at", "replacement_pod",
    )  # fmt: skip
    assert moved == {
        "usage_record__claim_uid": "uid-0", "pod_name": "llm-0", "node": "real-gpu-0",
        "gpu_uuid": GPU, "xid": 79, "started_at": T0, "ended_at": T0 + timedelta(seconds=42),
        "replacement_pod": "llm-1",
    }  # fmt: skip
    for name in ("Billing", "Support"):
        perms = Group.objects.get(name=name).permissions
        assert perms.filter(content_type__app_label="cluster", codename="view_sliceoutage")
