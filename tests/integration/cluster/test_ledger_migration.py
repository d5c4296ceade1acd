"""The claim ledger moves from billing to the room for observed state: every record and the
checkpoint survive the migration exactly (ids, times, sources, estimates), and billing reads the
same records afterwards."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.helpers.factories import make_world

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = [
    ("billing", "0005_ledger_estimated_times_and_checkpoint"),
    ("cluster", None),
]
T0 = datetime(2026, 11, 2, 9, 0, 0, tzinfo=UTC)


def _migrate(targets) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor


def _latest() -> list[tuple[str, str]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def test_claim_records_and_checkpoint_survive_the_move_exactly() -> None:
    world = make_world()
    project, product = world.project_a, world.products["tranche-v100-8g"]
    executor = _migrate(BEFORE)
    try:
        old = executor.loader.project_state([BEFORE[0]]).apps
        record = old.get_model("billing", "UsageRecord")
        checkpoint = old.get_model("billing", "MeteringCheckpoint")
        for i, (released, estimated) in enumerate([(None, False), (T0, True), (T0, False)]):
            record.objects.create(
                claim_uid=f"uid-{i}", claim_name=f"train-{i}-gpu", organization_id=project.
                organization_id, project_id=project.pk, product_id=product.pk, node="real-gpu-0",
                device=f"gpu-{i}", allocated_at=T0 - timedelta(hours=i + 1),
                released_at=released, opened_by="event", closed_by="resync" if released else "",
                times_estimated=estimated,
            )  # fmt: skip
        checkpoint.objects.create(stream="claims", resource_version="4711")
        before = list(record.objects.order_by("pk").values())
        kept = list(checkpoint.objects.values("stream", "resource_version"))
    finally:
        _migrate(_latest())

    from portal.billing.selectors import slice_seconds
    from portal.cluster.models import MeteringCheckpoint, UsageRecord

    assert list(UsageRecord.objects.order_by("pk").values()) == before
    assert list(MeteringCheckpoint.objects.values("stream", "resource_version")) == kept
    # billing prices the same lifetimes: 2 h open + 2 h + 3 h closed at T0, seen at T0 + 1 h
    held = slice_seconds(
        None, T0 - timedelta(hours=4), T0 + timedelta(hours=1), now=T0 + timedelta(hours=1)
    )
    assert held == {"tranche-v100-8g": (2 + 2 + 3) * 3600}
    # the ids go on from where billing's left off (the sequence moved with the table)
    extra = UsageRecord.objects.create(
        claim_uid="uid-new", claim_name="next", organization_id=project.organization_id,
        project_id=project.pk, product_id=product.pk, allocated_at=T0, opened_by="event",
    )  # fmt: skip
    assert extra.pk > max(row["id"] for row in before)
