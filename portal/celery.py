"""The Celery application shared by the portal and the controller's workers.

Two hooks make the order flow independent of luck when Redis restarts:
- `ResyncOnConnect`, a consumer bootstep, sends `controller.resync_all` each time the worker
  (re)connects to the broker, so orders whose messages were lost with Redis, or stranded in
  the unacked set when the connection dropped mid-task, are reconciled as soon as the broker is
  back instead of at the next beat tick or after the visibility timeout (an hour).
- Celery beat starts a heartbeat thread (`portal.core.heartbeats`) so `/readyz` can tell a
  stopped beat from a stopped worker.

And one keeps the database pool warm: Celery's Django fixup closes every connection before and
after each task and, in a prefork child with Django's pool, closes the pool itself
(`close_pool()`), so every task opened new PostgreSQL connections (~2 per reconcile at ~11.5 ms
each, issue #35). `CELERY_DB_REUSE_MAX` turns the fixup's closing off; `_return_connections`
does what Django does at the end of a request instead: a connection goes back to the pool, one
that failed or is obsolete is closed (the pool checks a connection when it hands it out). The
fixup still closes what a forked child inherited (`worker_process_init`).
"""

from __future__ import annotations

import logging
import os
import socket

from celery import Celery, bootsteps
from celery.signals import beat_init, task_postrun, task_prerun

from tranche import tasknames

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("tranche")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Read by Celery's DjangoWorkerFixup when a worker starts: close connections every 2 x this many
# tasks (i.e. never); `_return_connections` below hands them back to the pool instead.
app.conf["CELERY_DB_REUSE_MAX"] = 10**12
log = logging.getLogger("portal.celery")


class ResyncOnConnect(bootsteps.StartStopStep):
    """Runs in the worker's consumer, whose steps restart on every broker reconnection."""

    requires = {"celery.worker.consumer.tasks:Tasks"}

    def start(self, consumer) -> None:
        # To a queue this worker consumes, so a test worker never feeds another's queue.
        queue = next(iter(q.name for q in consumer.task_consumer.queues), None)
        consumer.app.send_task(tasknames.RESYNC_ALL, queue=queue)
        log.info("broker connected: sent controller.resync_all to %s to catch up", queue)


app.steps["consumer"].add(ResyncOnConnect)


@beat_init.connect
def _start_beat_heartbeat(sender=None, **kwargs) -> None:
    from portal.core.heartbeats import start_beat_heartbeat  # needs Django's apps loaded

    start_beat_heartbeat(f"beat@{os.environ.get('POD_NAME') or socket.gethostname()}")


@task_prerun.connect
@task_postrun.connect
def _return_connections(sender=None, **kwargs) -> None:
    """Each of this thread's Django connections back to its pool (or closed if unusable)."""
    if getattr(getattr(sender, "request", None), "is_eager", False):
        return  # an eager task runs inside its caller's request or test transaction
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        conn.close_if_unusable_or_obsolete()
