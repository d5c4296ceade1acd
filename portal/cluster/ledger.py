"""The claim ledger: claim allocations on Tranche devices become UsageRecords (billing reads them).

Two entry points, both idempotent and safe to call in any order or more than once, both taking
`tranche.observed.ObservedClaim`s the controller read from the cluster:
- `record_claim(kind, claim)`: one watch event of a ResourceClaim (ADDED/MODIFIED/DELETED);
- `resync_claims(claims, listed_at)`: the cluster's full list of claims (a relist or the
  periodic resync): opens what is allocated but unrecorded, closes what is recorded open but
  no longer allocated.

Times come from the cluster, not from when the watcher saw the change, so a watcher that was down
or behind still records exact lifetimes: allocation time is when the scheduler wrote
`status.allocation`, release time is the claim's deletionTimestamp when it has one. Only a
release the cluster kept no trace of (claim deallocated without deletion while nobody watched)
is closed at the time it was noticed.
Each claim allocation is one record: at most one open record per claim uid (a constraint), and an
allocation already closed (same uid, same allocation time) is never reopened.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Count, Max, Q
from django.utils import timezone

from portal.catalog.models import Product
from portal.cluster.models import MeteringCheckpoint, UsageRecord
from portal.tenants.models import Project
from tranche.observed import ObservedClaim

log = logging.getLogger(__name__)


def _targets(
    fact: ObservedClaim | None = None,
) -> tuple[dict[str, tuple[int, int]], dict[str, int]]:
    """namespace -> (project, organization) and device class -> product: of every project and
    product, or (`fact`) of one claim's namespace and class only, two rows rather than every
    project, for each of the fleet's claim events the watcher folds."""
    projects, products = Project.objects.all(), Product.objects.all()
    if fact is not None:
        projects = projects.filter(namespace=fact.namespace)
        products = products.filter(device_class=fact.device_class)
    return (
        {
            ns: (pid, org)
            for ns, pid, org in projects.values_list("namespace", "pk", "organization_id")
        },
        dict(products.values_list("device_class", "pk")),
    )


def _open(fact: ObservedClaim, now: datetime, source: str, projects, products) -> bool:
    """Open a record for an allocated claim unless this allocation is already recorded."""
    project = projects.get(fact.namespace)
    product = products.get(fact.device_class)
    if project is None or product is None or not fact.uid:
        return False  # not a tenant namespace or not a Tranche class: not billed
    allocated_at = min(fact.allocated_at or now, now)
    estimated = fact.allocated_at is None
    known = UsageRecord.objects.filter(claim_uid=fact.uid)
    if known.filter(released_at__isnull=True).exists():
        return False
    if known.filter(allocated_at__gte=allocated_at).exists():
        return False  # this allocation was recorded and closed already
    try:
        with transaction.atomic():
            UsageRecord.objects.create(
                claim_uid=fact.uid,
                claim_name=fact.name,
                organization_id=project[1],
                project_id=project[0],
                product_id=product,
                node=fact.node,
                device=fact.device,
                allocated_at=allocated_at,
                opened_by=source,
                times_estimated=estimated,
            )
    except IntegrityError:  # a concurrent writer opened it first
        return False
    return True


def _close(uid: str, at: datetime, source: str, estimated: bool = False) -> int:
    """Close the claim's open record at `at` (never before it was opened); `estimated` when
    `at` is when Tranche noticed, not a time the cluster recorded."""
    closed = 0
    for record in UsageRecord.objects.filter(claim_uid=uid, released_at__isnull=True):
        closed += UsageRecord.objects.filter(pk=record.pk, released_at__isnull=True).update(
            released_at=max(at, record.allocated_at),
            closed_by=source,
            times_estimated=record.times_estimated or estimated,
        )
    return closed


def record_claim(
    kind: str, fact: ObservedClaim, now: datetime | None = None, replaying: bool = False
) -> None:
    """Fold one watch event of a ResourceClaim into the ledger.

    `replaying`: the event comes from the history a started watcher reads since its checkpoint,
    so "now" is not when it happened. The allocation's time is the cluster's either way; a
    release is then taken from a later event's deletionTimestamp (the claim's deletion follows
    its de-allocation within moments), else closed when noticed and marked estimated."""
    now = now or timezone.now()
    if not fact.uid:
        return
    if kind == "DELETED" or not fact.allocated:
        if fact.deleted_at is not None:
            _close(fact.uid, min(fact.deleted_at, now), "event")
        elif not replaying:
            _close(fact.uid, now, "event")  # seen as it happened
        elif kind == "DELETED":
            _close(fact.uid, now, "event", estimated=True)
        return
    if fact.deleted_at is not None:
        # still allocated while being deleted: released from the deletion on
        _open(fact, now, "event", *_targets(fact))
        _close(fact.uid, min(fact.deleted_at, now), "event")
        return
    _open(fact, now, "event", *_targets(fact))


def resync_claims(
    claims: Iterable[ObservedClaim], listed_at: datetime, now: datetime | None = None
) -> dict[str, int]:
    """Make the ledger agree with the cluster's full list of claims (the truth), taken from a
    LIST request sent at `listed_at`. A record written after that (by a concurrent event) is
    newer than the list, so the list's silence about it proves nothing: it is left open.

    The ledger is read in bulk (a constant number of queries for any number of claims); only a
    claim whose record that read shows to be missing or open is looked at again, by `_open` and
    `_close`, which re-read its rows before they write."""
    now = now or timezone.now()
    projects, products = _targets()
    facts = [fact for fact in claims if fact.uid]
    known = _known_records([f.uid for f in facts if f.allocated or f.deleted_at is not None])
    opened = closed = 0
    live: set[str] = set()
    for fact in facts:
        has_open, latest = known.get(fact.uid, (False, None))
        if fact.allocated and not has_open:
            allocated_at = min(fact.allocated_at or now, now)
            if latest is None or latest < allocated_at:  # else recorded and closed already
                just_opened = _open(fact, now, "resync", projects, products)
                opened += just_opened
                has_open = has_open or just_opened
        if fact.deleted_at is not None:
            if has_open:  # a deleted claim without an open record has nothing to close
                closed += _close(fact.uid, min(fact.deleted_at, now), "resync")
        elif fact.allocated:
            live.add(fact.uid)
    stale = UsageRecord.objects.filter(released_at__isnull=True, recorded_at__lt=listed_at)
    for uid in stale.values_list("claim_uid", flat=True):
        if uid not in live:  # gone from the list: released while unseen, time unknown
            closed += _close(uid, now, "resync", estimated=True)
    if opened or closed:
        log.info("ledger resync: opened %d, closed %d", opened, closed)
    return {"opened": opened, "closed": closed}


def save_checkpoint(resource_version: str, stream: str = "claims") -> None:
    """Remember how far the ledger has followed `stream` (idempotent upsert, one query)."""
    if resource_version:
        MeteringCheckpoint.objects.bulk_create(
            [MeteringCheckpoint(stream=stream, resource_version=resource_version)],
            update_conflicts=True,
            unique_fields=["stream"],
            update_fields=["resource_version"],
        )


KNOWN_BATCH = 5000  # claim uids per query (bound parameters stay far below PostgreSQL's limit)


def _known_records(uids: list[str]) -> dict[str, tuple[bool, datetime | None]]:
    """claim uid -> (has an open record, latest allocation recorded), for the uids that have
    records; one query per KNOWN_BATCH uids."""
    known: dict[str, tuple[bool, datetime | None]] = {}
    for start in range(0, len(uids), KNOWN_BATCH):
        rows = (
            UsageRecord.objects.filter(claim_uid__in=uids[start : start + KNOWN_BATCH])
            .values("claim_uid")
            .annotate(
                open=Count("pk", filter=Q(released_at__isnull=True)), latest=Max("allocated_at")
            )
            .values_list("claim_uid", "open", "latest")
        )
        known.update({uid: (n > 0, latest) for uid, n, latest in rows})
    return known
