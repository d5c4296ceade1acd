"""The names of Tranche's Celery tasks: the one list the senders (portal, controller, beat) and
the workers (`@shared_task(name=...)`) both import, so a renamed task cannot leave a sender
posting to a name nobody consumes."""

from __future__ import annotations

RECONCILE_PROJECT = "controller.reconcile_project"
RESYNC_ALL = "controller.resync_all"
RETIRE_NAMESPACE = "controller.retire_namespace"
SYNC_GPU_MAINTENANCE = "controller.sync_gpu_maintenance"
RECORD_HEARTBEAT = "portal.core.record_heartbeat"
INVOICE_MONTH = "billing.invoice_month"
SCAN_IMAGES = "preflight.scan_images"
