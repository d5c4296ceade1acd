"""What the cluster said, stored: written only by `cluster.services`, `cluster.ledger` and
`cluster.outages`.

- `PodState`: each pod (and each workload that could not create one) of a project, classified
  into the tenant's words; bounded: a row exists only while its pod (or the refusal event)
  exists, at most `MAX_ROWS_PER_PROJECT` per project. The live page reads it.
- `ProjectUsage`: slices of one product allocated and pending in a project (the quota page).
- `QuotaUse`: the project's CPU/RAM use as its ResourceQuota reports it; the row exists once the
  watcher has seen the namespace's quota (the quota page's "Used" and headroom).
- `UsageRecord` / `MeteringCheckpoint`: the claim ledger billing reads (lifetimes of claims on
  Tranche devices) and how far it followed the claims' history.
- `SliceOutage`: each slice's downtime after its GPU failed (`cluster.outages` writes it).
"""

from __future__ import annotations

from django.db import models

from portal.catalog.models import Product
from portal.tenants.models import Organization, Project
from tranche.pod_reasons import NEXT_STEP_CHARS, WORDS_CHARS

MAX_ROWS_PER_PROJECT = 500
EVENTS_SHOWN = 10  # a pod's timeline: its last Warning events (the watcher keeps as many)
EVENT_MESSAGE_CHARS = 300
PENDING_REASON_CHARS = 500


class PodState(models.Model):
    """One pod (kind "Pod") or one refused workload (kind "ReplicaSet", "Job", ...)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="pod_states")
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    kind = models.CharField(max_length=32, default="Pod")
    phase = models.CharField(max_length=16)
    reason = models.CharField(max_length=32, help_text="reason class (tranche.pod_reasons)")
    words = models.CharField(max_length=WORDS_CHARS)
    next_step = models.CharField(max_length=NEXT_STEP_CHARS, blank=True)
    events = models.JSONField(
        default=list,
        blank=True,
        help_text="the pod's recent Warning events, oldest first: [time, reason, message]",
    )
    created_at = models.DateTimeField(auto_now_add=True, help_text="first seen by the portal")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [
            models.UniqueConstraint(fields=["namespace", "kind", "name"], name="one_state_per_pod")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}: {self.reason}"


class ProjectUsage(models.Model):
    """Slices of one product claimed in a project, as the watcher last saw them."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="usage")
    product = models.ForeignKey(Product, on_delete=models.CASCADE)
    allocated = models.PositiveIntegerField(default=0)
    pending = models.PositiveIntegerField(default=0)
    pending_reason = models.CharField(max_length=PENDING_REASON_CHARS, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "product"], name="one_usage_per_product")
        ]

    def __str__(self) -> str:
        return f"{self.project} {self.product.device_class}: {self.allocated}+{self.pending}"


class QuotaUse(models.Model):
    """CPU and RAM requested in a project's namespace, from its ResourceQuota's status."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="quota_use")
    cpu_used_millicores = models.PositiveIntegerField()
    memory_used_mib = models.PositiveIntegerField()
    updated_at = models.DateTimeField(auto_now=True, help_text="when a figure last changed")

    def __str__(self) -> str:
        return f"{self.project}: {self.cpu_used_millicores} m, {self.memory_used_mib} MiB"


class UsageRecord(models.Model):
    """One claim allocation on a Tranche device: open while `released_at` is null.

    Idempotent by claim uid: at most one open record per claim, and an allocation already closed
    is never reopened, so re-seeing a claim (relist, resync, replayed event) never counts twice.
    Slice-seconds are derived (released_at - allocated_at), never stored."""

    claim_uid = models.CharField(max_length=64, db_index=True)
    claim_name = models.CharField(max_length=253)
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="usage_records")
    product = models.ForeignKey(Product, on_delete=models.PROTECT, related_name="+")
    node = models.CharField(max_length=253, blank=True)
    device = models.CharField(max_length=253, blank=True, help_text="GPU device name on the node")
    allocated_at = models.DateTimeField(db_index=True)
    released_at = models.DateTimeField(null=True, blank=True, db_index=True)
    opened_by = models.CharField(max_length=16, help_text="event or resync")
    recorded_at = models.DateTimeField(auto_now_add=True)
    closed_by = models.CharField(max_length=16, blank=True)
    # True when a time is when Tranche noticed, not one the cluster recorded (the claim left no
    # trace of it: gone, or its history compacted, while no watcher ran); shown as estimated
    times_estimated = models.BooleanField(default=False)

    class Meta:
        ordering = ["-allocated_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["claim_uid"],
                condition=models.Q(released_at__isnull=True),
                name="one_open_usage_per_claim",
            ),
            models.CheckConstraint(
                condition=models.Q(released_at__isnull=True)
                | models.Q(released_at__gte=models.F("allocated_at")),
                name="usage_released_after_allocated",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.claim_name} ({self.product.device_class}) {self.allocated_at:%Y-%m-%d %H:%M}"


class MeteringCheckpoint(models.Model):
    """The last resourceVersion of claims the ledger followed: a watcher started after a gap
    replays the claims' history from it (while the API server keeps it) before relisting."""

    stream = models.CharField(max_length=32, unique=True)
    resource_version = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"{self.stream} at {self.resource_version}"


class SliceOutage(models.Model):
    """One slice's downtime, an observation like the ledger's: from its GPU's taint (the agent's
    fatal finding naming a pod on it) until a replacement pod runs (`ended_at`; null: not yet).
    The slice is the allocated claim (`usage_record`): pods sharing one claim share one outage.
    Opened by the agents' ingest, closed through the controller's write seam
    (`cluster.outages`); billing reads them for SLA credits."""

    usage_record = models.ForeignKey(
        UsageRecord, on_delete=models.PROTECT, related_name="+", null=True, blank=True
    )
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+")
    product = models.ForeignKey(Product, on_delete=models.PROTECT, related_name="+")
    pod_name = models.CharField(max_length=253, help_text="the pod the failure was reported for")
    node = models.CharField(max_length=253)
    gpu_uuid = models.CharField(max_length=64)
    xid = models.PositiveSmallIntegerField(null=True, blank=True)
    started_at = models.DateTimeField(db_index=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    replacement_pod = models.CharField(max_length=253, blank=True)

    class Meta:
        ordering = ["-started_at", "-pk"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(ended_at__isnull=True)
                | models.Q(ended_at__gte=models.F("started_at")),
                name="slice_outage_ends_after_start",
            ),
            models.UniqueConstraint(
                fields=["usage_record"],
                condition=models.Q(ended_at__isnull=True),
                name="one_open_slice_outage_per_claim",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.pod_name} down from {self.started_at:%Y-%m-%d %H:%M:%S}"
