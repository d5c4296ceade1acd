"""Platform health records."""

from __future__ import annotations

from django.db import models


class WorkerHeartbeat(models.Model):
    """The last sign of life of one long-running process (`worker`: its name, e.g. worker@host).

    role "worker": a Celery worker took beat's heartbeat task off Redis and wrote here; "beat":
    Celery beat's own loop; "watcher": the watcher's flusher wrote (so it reaches PostgreSQL).
    `/readyz` and the admin read these (`portal.core.heartbeats`)."""

    class Role(models.TextChoices):
        WORKER = "worker"
        BEAT = "beat"
        WATCHER = "watcher"

    worker = models.CharField(max_length=200, unique=True)
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.WORKER)
    seen_at = models.DateTimeField()
    beats = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["-seen_at"]

    def __str__(self) -> str:
        return f"{self.worker} @ {self.seen_at:%Y-%m-%d %H:%M:%S}"
