"""Celery tasks of the core app."""

from __future__ import annotations

from celery import shared_task

from portal.core import services
from tranche import tasknames


@shared_task(name=tasknames.RECORD_HEARTBEAT, bind=True, acks_late=True)
def record_heartbeat(self) -> int:
    """Record that this worker took a task off the broker and wrote to PostgreSQL."""
    return services.record_heartbeat(self.request.hostname or "unknown")
