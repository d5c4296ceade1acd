"""The Celery application shared by the portal and the controller's workers.

Two hooks make the order flow independent of luck when Redis restarts:
- `ResyncOnConnect`, a consumer bootstep, sends `controller.resync_all` each time the worker
  (re)connects to the broker, so orders whose messages were lost with Redis, or stranded in
  the unacked set when the connection dropped mid-task, are reconciled as soon as the broker is
  back instead of at the next beat tick or after the visibility timeout (an hour).
- Celery beat starts a heartbeat thread (`portal.core.heartbeats`) so `/readyz` can tell a
  stopped beat from a stopped worker.
"""

from __future__ import annotations

import logging
import os
import socket

from celery import Celery, bootsteps
from celery.signals import beat_init

from tranche import tasknames

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("tranche")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
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

    start_beat_heartbeat(f"beat@{socket.gethostname()}")
