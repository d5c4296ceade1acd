"""Platform health records."""

from __future__ import annotations

from django.db import models


class WorkerHeartbeat(models.Model):
    """The last time a Celery worker proved it can take a task off Redis and write to PostgreSQL."""

    worker = models.CharField(max_length=200, unique=True)
    seen_at = models.DateTimeField()
    beats = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["-seen_at"]

    def __str__(self) -> str:
        return f"{self.worker} @ {self.seen_at:%Y-%m-%d %H:%M:%S}"
