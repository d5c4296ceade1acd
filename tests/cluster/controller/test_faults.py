"""Faults: a worker SIGKILLed mid-reconcile and kube-apiserver down 30 s during 20 orders.

All 20 orders end `active`, each exactly once. "Mid-reconcile" is made certain, not hoped for:
the test holds a row lock on the first order, so the worker that picks it up stops inside
`reconcile_project`, holding the project's advisory lock, and is killed there. Its message is not
redelivered before the broker's visibility timeout (an hour); the resync that beat sends repairs
it, which is the design: the queue is a hint, the database is the truth.

The outage is played on a private control plane that this test starts (own state folder, own
loopback ports) through the launcher's public `stop_component` / `start_component`, so stopping
its kube-apiserver never disturbs other test sessions sharing the dev cluster (`private_cluster`
in the conftest).
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import pytest
from django.db import connection
from kubernetes import client, config

from controller.apply import Applier, TransientApiError
from controller.reconcile import LOCK_SPACE, resync_all
from deploy.devcluster import launcher
from tests.helpers.celery_worker import start_worker, stop_worker
from tests.helpers.wait import wait_for

ROOT = Path(__file__).resolve().parents[3]
log = logging.getLogger(__name__)
CLASS = "tranche-v100-8g"
OUTAGE_SECONDS = 30.0
BEAT_INTERVAL_SECONDS = 10.0  # how often this test sends beat's resync once the API is back


def _lock_holder(project_id: int, waiting: bool) -> int | None:
    """Backend pid holding the project's reconcile lock (and, if `waiting`, blocked on a lock)."""
    sql = """
        SELECT l.pid FROM pg_locks l
        WHERE l.locktype = 'advisory' AND l.classid = %s AND l.objid = %s AND l.objsubid = 2
          AND l.granted AND l.pid <> pg_backend_pid()
          AND (NOT %s OR EXISTS (SELECT 1 FROM pg_locks w WHERE w.pid = l.pid AND NOT w.granted))
    """
    with connection.cursor() as cur:
        cur.execute(sql, [LOCK_SPACE, project_id, waiting])
        row = cur.fetchone()
    return row[0] if row else None


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def test_sigkilled_worker_and_stopped_apiserver(
    tenant, controller_settings, private_cluster, tmp_path, record_property
) -> None:
    from portal.celery import app
    from portal.orders.models import Order, OrderEvent, Subscription
    from portal.orders.services import place_order
    from portal.tenants.models import Project
    from tranche.naming import derive_namespace

    cluster = private_cluster
    controller_settings.CONTROLLER_KUBECONFIG = str(cluster.kubeconfig)
    api = config.new_client_from_config(str(cluster.kubeconfig))
    org = tenant.project.organization
    projects = [tenant.project] + [
        Project.objects.create(
            organization=org,
            name=f"f{i}",
            slug=f"f{i}",
            namespace=derive_namespace(org.slug, f"f{i}"),
        )
        for i in range(1, 20)
    ]
    product = tenant.products[CLASS]

    def place(project: Project) -> int:
        order, _ = place_order(
            membership=tenant.membership,
            project=project,
            product=product,
            quantity=2,
            idempotency_key=secrets.token_hex(8),
        )
        return order.pk

    queue = controller_settings.CELERY_TASK_DEFAULT_QUEUE
    logs = [tmp_path / "worker-1.log", tmp_path / "worker-2.log"]
    workers: list[subprocess.Popen] = []
    # A connection of its own, outside Django's pool (pooled ones are in autocommit mode).
    hold = psycopg.connect(**connection.get_connection_params())
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    try:
        # 1. Ten orders queued, the first one's row locked, then a worker: it stops mid-reconcile.
        orders = [place(p) for p in projects[:10]]
        table = Order._meta.db_table  # the model's own table name; the id is a bound parameter
        hold.execute(f"SELECT id FROM {table} WHERE id = %s FOR UPDATE", [orders[0]])  # noqa: S608
        workers.append(start_worker(queue, cluster.kubeconfig, logs[0], concurrency=2, debug=False))
        victim_backend = wait_for(
            lambda: _lock_holder(projects[0].pk, waiting=True),
            90,
            f"a worker to stop inside reconcile_project of project {projects[0].pk} "
            f"(worker log:\n{_tail(logs[0])})",
        )
        os.killpg(workers[0].pid, signal.SIGKILL)  # no chance to ack, unlock or clean up
        workers[0].wait(10)
        timings["killed_after_s"] = time.monotonic() - t0
        hold.rollback()  # the dead worker's backend sees its client gone and aborts
        wait_for(
            lambda: _lock_holder(projects[0].pk, waiting=False) is None,
            30,
            f"the killed worker's advisory lock (backend {victim_backend}) to be released",
        )

        # 2. The API server goes away for 30 s; ten more orders arrive, a new worker starts.
        assert launcher.stop_component(cluster, "kube-apiserver"), "kube-apiserver was not running"
        down_at = time.monotonic()
        orders += [place(p) for p in projects[10:]]
        workers.append(start_worker(queue, cluster.kubeconfig, logs[1], concurrency=2, debug=False))
        with pytest.raises(TransientApiError):
            resync_all(Applier(api))  # beat's resync meets the outage as a transient error
        late = orders[10:]
        while time.monotonic() - down_at < OUTAGE_SECONDS:  # the outage itself, watched
            active = Order.objects.filter(pk__in=late, state=Order.State.ACTIVE).count()
            assert active == 0, f"{active} orders became active with kube-apiserver stopped"
            time.sleep(0.5)
        launcher.start_component(cluster, "kube-apiserver")
        up_at = time.monotonic()
        timings["outage_s"] = up_at - down_at

        # 3. Beat's resync, sent to the workers' queue each interval, until all 20 are active.
        sent_at = -BEAT_INTERVAL_SECONDS

        def all_active() -> bool:
            nonlocal sent_at
            if time.monotonic() - sent_at >= BEAT_INTERVAL_SECONDS:
                app.send_task("controller.resync_all", queue=queue)
                sent_at = time.monotonic()
            return Order.objects.filter(pk__in=orders, state=Order.State.ACTIVE).count() == 20

        wait_for(
            all_active,
            120,
            f"all 20 orders to be active (worker log:\n{_tail(logs[1])})",
        )
        timings["all_active_after_restart_s"] = time.monotonic() - up_at
    finally:
        for proc in workers:
            stop_worker(proc)
        hold.close()
        if launcher.running_pid(cluster, launcher.component(cluster, "kube-apiserver")) is None:
            launcher.start_component(cluster, "kube-apiserver")
        api.close()
    timings["total_s"] = time.monotonic() - t0
    figures = {k: round(v, 1) for k, v in timings.items()}
    record_property("fault_timings", figures)
    log.warning("fault timings: %s", figures)

    assert Order.objects.filter(organization=org).count() == 20
    assert Subscription.objects.filter(project__organization=org).count() == 20
    for order_id in orders:
        activations = OrderEvent.objects.filter(order_id=order_id, to_state="active").count()
        assert activations == 1, f"order {order_id} became active {activations} times"
    core = client.CoreV1Api(config.new_client_from_config(str(cluster.kubeconfig)))
    for p in projects:
        hard = core.read_namespaced_resource_quota("tranche-quota", p.namespace).spec.hard
        assert hard[f"{CLASS}.deviceclass.resource.k8s.io/devices"] == "2", (p.namespace, hard)
