"""PodState: what the cluster says about each pod (and each workload that could not create one)
of a project, classified into the tenant's words. Written only by `status.services`, from the
watcher; read by the live page. Bounded: a row exists only while its pod (or the workload's
refusal event) exists in the cluster, at most `MAX_ROWS_PER_PROJECT` per project."""

from __future__ import annotations

from django.db import models

MAX_ROWS_PER_PROJECT = 500
EVENTS_SHOWN = 10  # a pod's timeline: its last Warning events (the watcher keeps as many)
EVENT_MESSAGE_CHARS = 300


class PodState(models.Model):
    """One pod (kind "Pod") or one refused workload (kind "ReplicaSet", "Job", ...)."""

    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE)
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    kind = models.CharField(max_length=32, default="Pod")
    phase = models.CharField(max_length=16)
    reason = models.CharField(max_length=32, help_text="reason class (tranche.pod_reasons)")
    words = models.CharField(max_length=600)
    next_step = models.CharField(max_length=300, blank=True)
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
