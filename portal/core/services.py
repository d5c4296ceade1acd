"""Writes of the core app. Each is one transaction."""

from __future__ import annotations

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from portal.core.models import WorkerHeartbeat


def record_heartbeat(worker: str, role: str = WorkerHeartbeat.Role.WORKER) -> int:
    """Count one heartbeat for process `worker` of `role`. Idempotent in shape: one row per
    process, counter bumped with an UPDATE so two concurrent beats both count."""
    now = timezone.now()
    with transaction.atomic():
        WorkerHeartbeat.objects.get_or_create(
            worker=worker, defaults={"seen_at": now, "role": role}
        )
        WorkerHeartbeat.objects.filter(worker=worker).update(
            seen_at=now, role=role, beats=F("beats") + 1
        )
        return WorkerHeartbeat.objects.get(worker=worker).beats
