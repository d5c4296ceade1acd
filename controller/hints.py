"""The controller's own follow-ups: a reconcile it asks of its workers when the cluster moves on
before the next resync would notice (a claim gone that a cancel waits for).

Sent by name (`tranche.tasknames`) through the Celery app every process configures; a hint that
cannot reach the broker is logged and lost, and the next resync does the same work.
"""

from __future__ import annotations

import logging
import time

from celery import current_app
from django.conf import settings

from tranche import tasknames

log = logging.getLogger(__name__)


def send_reconcile(project_id: int) -> bool:
    """Ask a worker to reconcile the project now; False (logged) when the broker refused."""
    try:
        current_app.send_task(
            tasknames.RECONCILE_PROJECT,
            args=[project_id],
            queue=settings.CELERY_TASK_DEFAULT_QUEUE,
            retry=True,
            retry_policy={"max_retries": 1, "interval_start": 0, "interval_step": 0.5},
            # as the portal's messages: the queue's age metric reads it (docs/metrics.md)
            headers={"sent_at": time.time()},
        )
    except Exception:
        log.warning("could not send the reconcile of project %s: the resync will", project_id)
        return False
    return True
