"""The metering ledger on PostgreSQL, fed claim objects shaped as the API server sends them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from controller import desired, metering
from controller.observe import observed_claim
from portal.billing.selectors import slice_seconds
from portal.cluster import ledger
from portal.cluster.models import UsageRecord

CLASS = "tranche-v100-16g"
T0 = datetime(2026, 11, 10, 12, 0, 0, tzinfo=UTC)


def observe_claim(kind: str, obj: dict, **kwargs) -> None:
    """One watch event of a claim, read as the watcher reads it, into the ledger."""
    ledger.record_claim(kind, observed_claim(obj), **kwargs)


def resync_claims(claims: list[dict], **kwargs) -> dict[str, int]:
    """A LIST of claims, read as the watcher reads it, reconciled with the ledger."""
    return ledger.resync_claims([observed_claim(c) for c in claims], **kwargs)


def _iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def claim(ns: str, uid: str, allocated_at: datetime | None, deleted_at: datetime | None = None):
    meta = {"namespace": ns, "name": f"pod-{uid}-gpu", "uid": uid, "managedFields": []}
    status = {}
    if allocated_at is not None:
        status["allocation"] = {
            "devices": {"results": [{"pool": "node-1", "device": "gpu-0-slice-1"}]}
        }
        meta["managedFields"].append(
            {
                "manager": "kube-scheduler",
                "operation": "Update",
                "subresource": "status",
                "time": _iso(allocated_at),
                "fieldsV1": {"f:status": {"f:allocation": {}}},
            }
        )
    if deleted_at is not None:
        meta["deletionTimestamp"] = _iso(deleted_at)
    return {
        "metadata": meta,
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]}},
        "status": status,
    }


def test_events_open_and_close_with_cluster_times(world) -> None:
    ns = world.project_a.namespace
    now = T0 + timedelta(hours=1)
    observe_claim("ADDED", claim(ns, "u1", None), now=now)  # pending: nothing yet
    assert not UsageRecord.objects.exists()
    observe_claim("MODIFIED", claim(ns, "u1", T0), now=now)
    observe_claim("MODIFIED", claim(ns, "u1", T0), now=now)  # replayed: still one record
    record = UsageRecord.objects.get()
    assert (record.allocated_at, record.released_at, record.node) == (T0, None, "node-1")
    assert record.organization_id == world.org_a.pk
    end = T0 + timedelta(minutes=30)
    observe_claim("MODIFIED", claim(ns, "u1", T0, deleted_at=end), now=now)
    observe_claim("DELETED", claim(ns, "u1", T0, deleted_at=end), now=now)
    record.refresh_from_db()
    assert record.released_at == end
    assert slice_seconds(world.org_a, T0, T0 + timedelta(days=1)) == {CLASS: 1800}


def test_other_namespaces_and_classes_are_not_billed(world) -> None:
    observe_claim("ADDED", claim("kube-system", "x1", T0), now=T0)
    other = claim(world.project_a.namespace, "x2", T0)
    other["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "gpu.nvidia.com"
    observe_claim("ADDED", other, now=T0)
    assert not UsageRecord.objects.exists()


def test_resync_opens_missed_and_closes_vanished_without_double_count(world) -> None:
    ns = world.project_a.namespace
    listed = T0 + timedelta(hours=2)
    # the watcher saw u1 allocated, then missed its deletion; it missed u2's allocation entirely
    observe_claim("ADDED", claim(ns, "u1", T0), now=T0)
    UsageRecord.objects.update(recorded_at=T0)
    truth = [claim(ns, "u2", T0 + timedelta(minutes=5)), claim(ns, "u3", None)]
    assert resync_claims(truth, listed_at=listed, now=listed) == {"opened": 1, "closed": 1}
    assert resync_claims(truth, listed_at=listed, now=listed) == {"opened": 0, "closed": 0}
    u1 = UsageRecord.objects.get(claim_uid="u1")
    assert u1.released_at == listed  # no trace of when: closed when noticed
    u2 = UsageRecord.objects.get(claim_uid="u2")
    assert (u2.allocated_at, u2.opened_by) == (T0 + timedelta(minutes=5), "resync")
    # an event for u2 after the resync changes nothing; its deletion closes it exactly
    observe_claim("MODIFIED", claim(ns, "u2", T0 + timedelta(minutes=5)), now=listed)
    observe_claim("DELETED", claim(ns, "u2", T0 + timedelta(minutes=5), T0 + timedelta(hours=3)))
    assert UsageRecord.objects.count() == 2
    assert slice_seconds(world.org_a, T0, T0 + timedelta(days=1)) == {
        CLASS: 2 * 3600 + (3 * 3600 - 300)
    }


def test_resync_leaves_records_newer_than_its_list(world) -> None:
    ns = world.project_a.namespace
    listed = datetime.now(UTC) - timedelta(seconds=5)
    observe_claim("ADDED", claim(ns, "u9", T0))  # recorded after the LIST was sent
    assert resync_claims([], listed_at=listed) == {"opened": 0, "closed": 0}
    assert UsageRecord.objects.get().released_at is None


def test_closed_allocation_is_never_reopened_but_a_new_one_is(world) -> None:
    ns = world.project_a.namespace
    observe_claim("ADDED", claim(ns, "u1", T0), now=T0)
    observe_claim("MODIFIED", claim(ns, "u1", None), now=T0 + timedelta(hours=1))
    observe_claim("MODIFIED", claim(ns, "u1", T0), now=T0 + timedelta(hours=2))  # stale replay
    assert UsageRecord.objects.count() == 1
    observe_claim("MODIFIED", claim(ns, "u1", T0 + timedelta(hours=3)), now=T0 + timedelta(hours=3))
    assert UsageRecord.objects.filter(released_at__isnull=True).count() == 1
    assert UsageRecord.objects.count() == 2


def test_resync_reads_the_ledger_in_bulk_whatever_the_number_of_claims(world) -> None:
    """A resync that finds the ledger right issues the same few queries for 3 claims or 30
    (the targets, the listed claims' records, the open records), not one or two per claim."""
    ns = world.project_a.namespace
    listed = T0 + timedelta(hours=1)

    def noop_queries(count: int) -> int:
        truth = [claim(ns, f"b{i}", T0) for i in range(count)]
        resync_claims(truth, listed_at=listed, now=listed)  # records what is new
        with CaptureQueriesContext(connection) as queries:
            assert resync_claims(truth, listed_at=listed, now=listed) == {"opened": 0, "closed": 0}
        return len(queries)

    assert noop_queries(3) == noop_queries(30) <= 4
    assert UsageRecord.objects.filter(released_at__isnull=True).count() == 30


def test_history_replayed_after_a_gap_gives_the_cluster_times(world) -> None:
    """Issue #29 item 8: a claim's history replayed late (the watcher was down across its whole
    life) is recorded with the cluster's times (allocation from managedFields, release from the
    deletion that follows the de-allocation), not the replay's, and marked exact."""
    ns = world.project_a.namespace
    replayed_at = T0 + timedelta(minutes=40)
    deleted = T0 + timedelta(minutes=7)
    for kind, obj in (
        ("ADDED", claim(ns, "u9", None)),
        ("MODIFIED", claim(ns, "u9", T0)),
        ("MODIFIED", claim(ns, "u9", None)),  # de-allocated: no time of its own
        ("MODIFIED", claim(ns, "u9", None, deleted_at=deleted)),
        ("DELETED", claim(ns, "u9", None, deleted_at=deleted)),
    ):
        observe_claim(kind, obj, now=replayed_at, replaying=True)
    record = UsageRecord.objects.get(claim_uid="u9")
    assert (record.allocated_at, record.released_at) == (T0, deleted)
    assert not record.times_estimated


def test_a_release_with_no_trace_is_marked_estimated(world) -> None:
    """A claim gone from the list while unseen is closed when noticed, and says so; so is a
    replayed deletion that carries no time."""
    from django.utils import timezone

    ns = world.project_a.namespace
    observe_claim("MODIFIED", claim(ns, "u8", T0), now=T0 + timedelta(minutes=1))
    noticed = T0 + timedelta(minutes=30)
    listed = timezone.now() + timedelta(seconds=60)  # after the records were written
    resync_claims([], listed_at=listed, now=noticed)
    record = UsageRecord.objects.get(claim_uid="u8")
    assert (record.released_at, record.times_estimated) == (noticed, True)
    observe_claim("MODIFIED", claim(ns, "u7", T0), now=T0 + timedelta(minutes=1), replaying=True)
    observe_claim("DELETED", claim(ns, "u7", None), now=noticed, replaying=True)
    record = UsageRecord.objects.get(claim_uid="u7")
    assert (record.released_at, record.times_estimated) == (noticed, True)


def test_the_billing_page_shows_estimated_use(world, client_of) -> None:
    from django.urls import reverse
    from django.utils import timezone

    from tests.integration.billing.helpers import place_at

    now = timezone.now()
    place_at(world.membership(world.owner), world.project_a, world.products[CLASS], 1, now)
    ns = world.project_a.namespace
    observe_claim("MODIFIED", claim(ns, "u6", now - timedelta(seconds=5)), now=now)
    resync_claims([], listed_at=now + timedelta(seconds=60), now=now + timedelta(seconds=1))
    body = client_of(world.owner).get(reverse("billing", args=[world.org_a.pk])).content.decode()
    assert "(estimated)" in body


@pytest.mark.django_db(transaction=True)  # the watcher's hooks close their connection
def test_the_claims_checkpoint_is_saved_once_a_flush_not_once_an_event(
    world, django_assert_num_queries
) -> None:
    """Ten claim events, then the flusher's save: the ledger holds all ten and the checkpoint
    the last one's version, written by one query; a save with nothing new writes nothing, and
    an event the ledger could not record does not move the checkpoint past it."""
    ns = world.project_a.namespace
    checkpoint = metering.ClaimsCheckpoint()
    for i in range(10):
        obj = claim(ns, f"u{i}", T0)
        obj["metadata"]["resourceVersion"] = str(100 + i)
        metering.meter_claim_event("ADDED", obj, checkpoint)
    assert desired.claims_checkpoint() is None  # nothing saved with the events
    assert UsageRecord.objects.filter(project=world.project_a).count() == 10
    with CaptureQueriesContext(connection) as saved:
        assert checkpoint.save()
    statements = [q["sql"] for q in saved.captured_queries if q["sql"] not in ("BEGIN", "COMMIT")]
    (upsert,) = statements
    assert "ON CONFLICT" in upsert
    assert desired.claims_checkpoint() == "109"
    with django_assert_num_queries(0):
        assert not checkpoint.save()
    broken = claim(ns, "u" * 65, T0)  # longer than a uid: PostgreSQL refuses the record
    broken["metadata"]["resourceVersion"] = "110"
    metering.meter_claim_event("ADDED", broken, checkpoint)
    assert not checkpoint.save()
    assert desired.claims_checkpoint() == "109"
