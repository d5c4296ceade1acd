"""NodeToken (one per GPU node, only its SHA-256 kept) and PodSliceStatus (latest state per pod).
Written only through `agents.services`."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from tranche.agent_protocol import PodReport, fields_of
from tranche.health_kinds import HEALTH_KINDS

# Column sizes are the message schema's bounds: what validates always fits.
_POD = fields_of(PodReport)


class NodeToken(models.Model):
    """The credential of one node's agent. The plaintext is shown once, at creation."""

    node_name = models.CharField(max_length=253, unique=True)
    token_hash = models.CharField(max_length=64, editable=False)
    token_prefix = models.CharField(
        max_length=8, editable=False, help_text="first characters, to tell tokens apart"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_seen_at = models.DateTimeField(null=True, blank=True, editable=False)
    gpus = models.JSONField(default=list, blank=True, editable=False, help_text="latest GPUs")
    dropped_messages = models.PositiveBigIntegerField(default=0, editable=False)
    findings = models.JSONField(
        default=list,
        blank=True,
        editable=False,
        help_text="the agent's last findings for support (tranche.agent_protocol.Finding)",
    )
    refused_health = models.JSONField(
        default=list,
        blank=True,
        editable=False,
        help_text="the last health findings of this node the ingest refused, and why "
        "(portal.agents.health_admission): the support console's alert",
    )

    class Meta:
        ordering = ["node_name"]

    def __str__(self) -> str:
        return self.node_name


class PodSliceStatus(models.Model):
    """Latest slice figures of one pod as its node's agent last reported them."""

    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE)
    node_name = models.CharField(max_length=253)
    namespace = models.CharField(max_length=_POD["namespace"].max_length)
    pod_name = models.CharField(max_length=_POD["pod"].max_length)
    pod_uid = models.CharField(max_length=_POD["uid"].max_length)
    gpu_uuid = models.CharField(max_length=_POD["gpu_uuid"].max_length)
    memory_limit_bytes = models.PositiveBigIntegerField()
    memory_used_bytes = models.PositiveBigIntegerField()
    rejected_allocations = models.PositiveBigIntegerField()
    compute_target_percent = models.PositiveSmallIntegerField()
    compute_used_percent = models.FloatField()
    throttled_seconds = models.FloatField()
    processes = models.PositiveIntegerField(default=0)
    # Seconds the slice has been under 1 % kernel-busy (the agent's count): the live page's and
    # the support console's idle finding (portal/status/idle.py) past IDLE_SLICE_SECONDS.
    idle_seconds = models.FloatField(default=0)
    # Why the node agent's backstop holds the pod to its compute share or stopped processes of
    # it lately, in the tenant's words ("" when it does not): the live page's Backstop column.
    enforcement = models.CharField(max_length=300, blank=True, default="")
    reported_at = models.DateTimeField(help_text="agent clock")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["namespace", "pod_name"]
        constraints = [
            models.UniqueConstraint(fields=["namespace", "pod_name"], name="one_status_per_pod")
        ]
        # every frame asks which projects have rows on the reporting node (the stale mark)
        indexes = [models.Index(fields=["node_name"], name="pod_status_by_node")]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pod_name} on {self.node_name}"


class PodMinute(models.Model):
    """One minute of one pod's slice figures, for the live page's 24 h charts. Written only by
    `agents.history` (one upsert per pod and minute, however often the agent reports), pruned
    after `history.RETENTION`: at most 1440 rows per pod."""

    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE)
    namespace = models.CharField(max_length=_POD["namespace"].max_length)
    pod_name = models.CharField(max_length=_POD["pod"].max_length)
    minute = models.DateTimeField(help_text="start of the minute (agent clock, UTC)")
    memory_used_max_bytes = models.PositiveBigIntegerField()
    memory_limit_bytes = models.PositiveBigIntegerField()
    compute_used_sum = models.FloatField(help_text="sum of the minute's samples (mean = sum / n)")
    compute_target_percent = models.PositiveSmallIntegerField()
    samples = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["namespace", "pod_name", "minute"], name="one_sample_per_pod_minute"
            )
        ]
        indexes = [models.Index(fields=["project", "minute"], name="pod_minute_by_project")]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pod_name} at {self.minute:%H:%M}"


class GpuHealthEvent(models.Model):
    """One GPU health finding of a node's agent (nodeagent/health.py), kept as its own row:
    the GPU's own (failed, recovered, unknown XID: support's) and each pod's it touched (its
    GPU failed, or one of its processes hit an application XID: that tenant's). Written only
    by `agents.gpu_health`; the support console and the live page only read them."""

    node_name = models.CharField(max_length=253)
    gpu_uuid = models.CharField(max_length=64)
    kind = models.CharField(max_length=32, choices=[(k, k) for k in HEALTH_KINDS])
    xid = models.PositiveSmallIntegerField(null=True, blank=True)
    project = models.ForeignKey("tenants.Project", null=True, blank=True, on_delete=models.CASCADE)
    namespace = models.CharField(max_length=63, blank=True)
    pod_name = models.CharField(max_length=253, blank=True)
    detail = models.CharField(max_length=500)
    occurred_at = models.DateTimeField(help_text="agent clock")
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-occurred_at", "-pk"]
        indexes = [
            models.Index(fields=["gpu_uuid", "occurred_at"], name="gpu_health_by_gpu"),
            models.Index(fields=["project", "occurred_at"], name="gpu_health_by_project"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.gpu_uuid} at {self.occurred_at:%Y-%m-%d %H:%M:%S}"


class GpuServiceMark(models.Model):
    """Support's word on one GPU (the support console, `agents.gpu_service`): out for
    maintenance (a NoSchedule DeviceTaintRule the controller applies: no new claims, running
    ones finish) or back in service (the rule deleted, and the agent told to drop its own
    health taint once the GPU answers). The newest mark of a GPU is its state; every mark is
    audited. `settled_at`: when the agent reported the GPU recovered after an in-service mark
    (until then the portal repeats the mark in its answers to the node's agent)."""

    MAINTENANCE = "maintenance"
    IN_SERVICE = "in-service"

    node_name = models.CharField(max_length=253)
    gpu_uuid = models.CharField(max_length=64)
    action = models.CharField(
        max_length=16, choices=[(MAINTENANCE, "out for maintenance"), (IN_SERVICE, "in service")]
    )
    by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    at = models.DateTimeField(auto_now_add=True)
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-pk"]
        indexes = [
            models.Index(fields=["gpu_uuid", "at"], name="gpu_service_by_gpu"),
            models.Index(fields=["node_name", "at"], name="gpu_service_by_node"),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_uuid} on {self.node_name}: {self.action}"
