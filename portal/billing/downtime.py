"""Each slice's downtime in the billing ledger (`SliceOutage`), from its GPU's taint until its
pod runs again elsewhere (docs/billing.md, "SLA credits").

- Opened from the health events (`sync_outages`): a fatal XID's `pod-gpu-failed` event names
  each pod whose claim was allocated on the failed GPU, at the instant the agent tainted the
  device. The slice is the pod's claim in the metering ledger (the record open then on that
  node, named after the pod, or the project's only one there): one outage per claim, however
  many pods share it, and a later fatal event of a slice already down opens nothing more. A
  pod holding no metered claim is no billed slice and opens nothing.
- Closed by the cluster (`observe_running`, from the watcher's pod events and relists): a pod
  of the same project and product created after the taint, Running at the time its containers
  started (the cluster's time), ends the oldest open outage it can; each pod ends one.
- Still open at the period's end: the period's end counts (`month_downtime`).

All idempotent (one outage per health event, a compare-and-swap close), safe to repeat.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import IntegrityError, connection, transaction
from django.db.models import Q

from portal.agents.models import GpuHealthEvent
from portal.billing.models import SliceOutage
from portal.cluster.models import UsageRecord
from portal.tenants.models import Project


def _claim_of(event: GpuHealthEvent) -> UsageRecord | None:
    """The ledger record of the pod's claim on the failed GPU's node at the failure."""
    records = UsageRecord.objects.filter(
        project_id=event.project_id,
        node=event.node_name,
        allocated_at__lte=event.occurred_at,
    ).filter(Q(released_at__isnull=True) | Q(released_at__gte=event.occurred_at))
    named = records.filter(claim_name__startswith=f"{event.pod_name}-").first()
    return named or (records.first() if records.count() == 1 else None)


def sync_outages(namespace: str | None = None, project_ids: list[int] | None = None) -> int:
    """Open an outage for each pod-gpu-failed event without one (of `namespace`, of
    `project_ids`, or all)."""
    events = GpuHealthEvent.objects.filter(kind="pod-gpu-failed", project__isnull=False).exclude(
        pk__in=SliceOutage.objects.values("health_event_id")
    )
    if namespace is not None:
        events = events.filter(namespace=namespace)
    if project_ids is not None:
        events = events.filter(project_id__in=project_ids)
    opened = 0
    for event in events.select_related("project").order_by("occurred_at", "pk"):
        record = _claim_of(event)
        if record is None:
            continue
        # One outage per slice: the pods sharing its claim each report the failure, and a second
        # fatal event of the same failure (XID, then "stops answering") opens nothing. An
        # outage's end is its replacement's Running time in whole seconds (the containers
        # started up to a second later): an event within that second may precede the real end.
        covered = SliceOutage.objects.filter(
            Q(project_id=event.project_id, pod_name=event.pod_name) | Q(usage_record=record)
        )
        since = event.occurred_at - timedelta(seconds=1)
        if covered.filter(Q(ended_at__isnull=True) | Q(ended_at__gt=since)).exists():
            continue
        try:
            with transaction.atomic():
                SliceOutage.objects.create(
                    health_event=event,
                    organization_id=event.project.organization_id,
                    project_id=event.project_id,
                    product_id=record.product_id,
                    usage_record=record,
                    pod_name=event.pod_name,
                    started_at=event.occurred_at,
                )
                opened += 1
        except IntegrityError:  # a concurrent sync opened it first
            continue
    return opened


def _pending(namespace: str) -> bool:
    """Whether the namespace is a project's with an open outage or a failure event that has not
    opened one yet (what `sync_outages(namespace)` would open). The watcher asks this for every
    event of every running pod and nearly always the answer is no: one query, written out
    because compiling it through the ORM cost several times its own run on that hot path."""
    sql = f"""
        SELECT EXISTS (
          SELECT 1 FROM {Project._meta.db_table} p WHERE p.namespace = %s AND (
            EXISTS (SELECT 1 FROM {SliceOutage._meta.db_table} o
                    WHERE o.project_id = p.id AND o.ended_at IS NULL)
            OR EXISTS (SELECT 1 FROM {GpuHealthEvent._meta.db_table} e
                       WHERE e.kind = 'pod-gpu-failed' AND e.namespace = %s
                         AND e.project_id IS NOT NULL
                         AND NOT EXISTS (SELECT 1 FROM {SliceOutage._meta.db_table} s
                                         WHERE s.health_event_id = e.id))))"""  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(sql, [namespace, namespace])
        return bool(cursor.fetchone()[0])


def observe_running(
    namespace: str,
    pod_name: str,
    device_classes: Iterable[str],
    created_at: datetime,
    running_at: datetime,
) -> int:
    """A pod of `namespace` holding claims of `device_classes` runs since `running_at`: end the
    oldest open outage of its project and product that began before the pod was created (it is
    a replacement, not a pod that ran through the failure). Returns how many it ended (0, 1)."""
    classes = list(device_classes)
    if not classes or not _pending(namespace):
        return 0
    sync_outages(namespace)
    mine = SliceOutage.objects.filter(project__namespace=namespace)
    if mine.filter(replacement_pod=pod_name, ended_at__gte=created_at).exists():
        return 0  # this pod already ended one
    for outage in mine.filter(
        ended_at__isnull=True,
        product__device_class__in=classes,
        # creationTimestamp has whole seconds: a pod created in the taint's second counts
        started_at__lt=created_at + timedelta(seconds=1),
    ).order_by("started_at", "pk"):
        ended = SliceOutage.objects.filter(pk=outage.pk, ended_at__isnull=True).update(
            ended_at=max(running_at, outage.started_at), replacement_pod=pod_name
        )
        if ended:
            return 1
    return 0


def month_outages(project_ids: list[int], begin: datetime, end: datetime) -> list[SliceOutage]:
    """The outages overlapping [begin, end) of these projects (after opening their new ones: a
    billing page or quote reads a few projects, so only theirs are scanned)."""
    sync_outages(project_ids=project_ids)
    return list(
        SliceOutage.objects.filter(project_id__in=project_ids, started_at__lt=end)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=begin))
        .select_related("health_event")
        .order_by("started_at", "pk")
    )


def downtime_seconds(outage: SliceOutage, begin: datetime, end: datetime) -> int:
    """Seconds of the outage inside [begin, end) (still open: until `end`), rounded up, and at
    least one for an outage in the window: its end is the cluster's Running time, which has
    whole seconds (the containers started up to a second after it), so a replacement running
    0.8 s after the taint was down 0.8 to 1.8 s, never none."""
    stop = min(outage.ended_at or end, end)
    start = max(outage.started_at, begin)
    if stop < start or outage.started_at >= end:
        return 0
    return max(1, math.ceil((stop - start).total_seconds()))
