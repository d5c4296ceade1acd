"""Thin Celery wrappers: ids in, idempotent reconciles out.

`reconcile_project` is what the portal sends on commit, `retire_namespace` when a project is
deleted and `sync_gpu_maintenance` when support marks a GPU; `resync_all` is what beat runs
(their names: `tranche.tasknames`). All are `acks_late` (a killed worker's message is
redelivered) and retry only named transient errors, with exponential backoff and jitter. A lost
message costs nothing: the next resync reconciles every project.
"""

from __future__ import annotations

import logging
import time

from celery import shared_task
from celery.signals import worker_ready
from django.db import InterfaceError, OperationalError

from controller import desired, gpu_maintenance, metering, metrics, reconcile, retire
from controller.apply import Applier, TransientApiError, shared_api_client
from tranche import tasknames

log = logging.getLogger(__name__)
TRANSIENT = (TransientApiError, OperationalError, InterfaceError)
RETRY = {
    "acks_late": True,
    "autoretry_for": TRANSIENT,
    "retry_backoff": 1,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": 10,
}


@shared_task(name=tasknames.RECONCILE_PROJECT, **RETRY)
def reconcile_project(project_id: int) -> dict:
    """Reconcile one project; returns a small summary for the result backend / logs.

    A project deleted after the message was sent has nothing left to reconcile: logged, done."""
    began = time.monotonic()
    try:
        result = reconcile.reconcile_project(int(project_id))
    except desired.ProjectGone:
        metrics.observe_reconcile("gone", time.monotonic() - began)
        log.info("project %s no longer exists: nothing to reconcile", project_id)
        return {"project": project_id, "writes": 0, "orders": 0, "gone": True}
    except TRANSIENT:
        metrics.observe_reconcile("retried", time.monotonic() - began)
        raise
    except Exception:
        metrics.observe_reconcile("failed", time.monotonic() - began)
        raise
    metrics.observe_reconcile("applied", time.monotonic() - began)
    return {
        "project": project_id,
        "writes": result.writes,
        "orders": result.orders,
        "ms": round(1000 * result.seconds, 1),
        "api_ms": round(1000 * result.api_seconds, 1),
    }


@shared_task(name=tasknames.RESYNC_ALL, **RETRY)
def resync_all() -> dict:
    """Check every project against the cluster (beat); a no-op resync writes nothing."""
    return resync(Applier(shared_api_client()))


def resync(applier: Applier) -> dict:
    """What the periodic resync does, through `applier` (which counts its calls): every project
    against the cluster, then the metering ledger against the cluster's claims."""
    began = time.monotonic()
    results = reconcile.resync_all(applier)
    ledger = metering.resync_ledger(applier)
    writes = sum(r.writes for r in results)
    metrics.observe_resync(time.monotonic() - began, writes)
    return {"projects": len(results), "writes": writes, "ledger": ledger}


@shared_task(name=tasknames.RETIRE_NAMESPACE, **RETRY)
def retire_namespace(namespace: str) -> dict:
    """Remove a deleted project's namespace (access objects first); idempotent."""
    return {"namespace": namespace, "deleted": len(retire.retire_namespace(str(namespace)))}


@shared_task(name=tasknames.SYNC_GPU_MAINTENANCE, **RETRY)
def sync_gpu_maintenance() -> dict:
    """Support marked a GPU out for maintenance or back in service: its DeviceTaintRule."""
    return {"changes": gpu_maintenance.sync_gpu_maintenance(Applier(shared_api_client()))}


@worker_ready.connect
def _serve_metrics(sender=None, **kwargs) -> None:
    """The worker's parent serves the controller's /metrics (controller/metrics.py); the
    pre-flight worker, which imports these tasks too, is started with the port set to 0."""
    from django.conf import settings

    metrics.serve(
        "TRANCHE_CONTROLLER_METRICS_PORT",
        metrics.WORKER_PORT,
        queue=(settings.CELERY_BROKER_URL, settings.CELERY_TASK_DEFAULT_QUEUE),
    )
