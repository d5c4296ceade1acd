"""Hand reconcile work to the controller's Celery workers, by name (`tranche.tasknames`; no
`controller` import), through the Celery app every process configures (`portal.celery`).

Messages are hints: the database is the truth and the periodic resync repairs a lost message, so
a broker outage is logged, never raised into the tenant's request.
"""

from __future__ import annotations

import logging
import threading
import time

from celery import current_app
from django.conf import settings
from django.db import transaction

from tranche import tasknames

log = logging.getLogger(__name__)
_last_send = threading.local()  # on_commit callbacks run in the committing thread


def _send(task: str, args: list, if_lost: str = "") -> bool:
    """Send `task(*args)` to the controller's queue now; False (logged, with `if_lost` saying what
    repairs the loss) when the broker refused it."""
    try:
        current_app.send_task(
            task,
            args=args,
            queue=settings.CELERY_TASK_DEFAULT_QUEUE,
            retry=True,
            retry_policy={"max_retries": 1, "interval_start": 0, "interval_step": 0.5},
            # The queue's age metric reads it from the oldest waiting message (docs/metrics.md).
            headers={"sent_at": time.time()},
        )
    except Exception:
        log.warning("could not enqueue %s(%s)%s", task, ", ".join(map(str, args)), if_lost)
        return False
    return True


def send_reconcile(project_id: int) -> None:
    """Send `controller.reconcile_project(project_id)` now (call after commit)."""
    _last_send.failed = not _send(
        tasknames.RECONCILE_PROJECT, [project_id], "; the resync will catch up"
    )


def last_send_failed() -> bool:
    """True when this thread's latest reconcile message could not reach the broker (the
    order is stored; the resync after the queue comes back provisions it)."""
    return getattr(_last_send, "failed", False)


def enqueue_reconcile(project_id: int) -> None:
    """Send the reconcile once the current transaction commits (nothing if it rolls back)."""
    transaction.on_commit(lambda: send_reconcile(project_id))


def send_retire_namespace(namespace: str) -> None:
    """Send `controller.retire_namespace(namespace)` now (call after commit)."""
    _send(tasknames.RETIRE_NAMESPACE, [namespace])


def enqueue_retire_namespace(namespace: str) -> None:
    """On commit, ask the controller to remove a deleted project's namespace (it checks that no
    project still names it and that Tranche manages it before deleting anything)."""
    transaction.on_commit(lambda: send_retire_namespace(namespace))


def enqueue_gpu_maintenance() -> None:
    """On commit, ask the controller to bring the GPUs' maintenance DeviceTaintRules in line
    with support's marks (level-triggered: it applies every GPU's newest mark)."""
    transaction.on_commit(
        lambda: _send(
            tasknames.SYNC_GPU_MAINTENANCE,
            [],
            "; the next mark, or the task run by hand, repairs it",
        )
    )
