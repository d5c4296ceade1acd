"""Faults: a worker SIGKILLed mid-reconcile and kube-apiserver down 30 s during 20 orders.

All 20 orders end `active`, each exactly once. The in-flight message of the killed worker is not
redelivered before the broker's visibility timeout; the resync (what beat runs) repairs it, which
is the design: the queue is a hint, the database is the truth.
Stopping one component uses the devcluster launcher's own start/stop of a single component.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection
from kubernetes import client

from controller.apply import TransientApiError
from controller.reconcile import resync_all
from tests.cluster.controller.conftest import wait_for

ROOT = Path(__file__).resolve().parents[3]
CLASS = "tranche-v100-8g"


def _worker(queue: str, kubeconfig: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "TRANCHE_CELERY_QUEUE": queue,
        "KUBECONFIG": kubeconfig,
        "TRANCHE_DB_NAME": connection.settings_dict["NAME"],
        "PYTHONPATH": str(ROOT),
    }
    cmd = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "portal",
        "worker",
        "-Q",
        queue,
        "-c",
        "2",
        "--without-mingle",
        "--without-gossip",
        "-l",
        "warning",
    ]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)


def _apiserver():
    from deploy.devcluster import launcher
    from deploy.devcluster.components import all_components
    from deploy.devcluster.config import load_settings

    settings = load_settings()
    component = next(c for c in all_components(settings) if c.name == "kube-apiserver")
    return launcher, settings, component


def test_sigkilled_worker_and_stopped_apiserver(tenant, kube_cluster, controller_settings) -> None:
    if os.environ.get("KUBECONFIG"):
        pytest.skip("an external cluster: the launcher cannot stop its kube-apiserver")
    from portal.orders.models import Order, OrderEvent
    from portal.tenants.models import Project
    from portal.tenants.naming import derive_namespace

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
    queue, kubeconfig = controller_settings.CELERY_TASK_DEFAULT_QUEUE, str(kube_cluster.kubeconfig)
    launcher, settings, apiserver = _apiserver()
    worker = _worker(queue, kubeconfig)
    try:
        orders = []
        for p in projects[:10]:
            tenant.project = p
            orders.append(tenant.order(CLASS, 2).pk)
        wait_for(
            lambda: Order.objects.filter(pk__in=orders).exclude(state="pending").exists(),
            60,
            "the worker to start reconciling",
        )
        os.killpg(worker.pid, signal.SIGKILL)  # mid-reconcile: no chance to ack or clean up
        worker.wait(10)

        launcher._stop(settings, apiserver, quiet=True)
        down_at = time.monotonic()
        for p in projects[10:]:
            tenant.project = p
            orders.append(tenant.order(CLASS, 2).pk)
        worker = _worker(queue, kubeconfig)  # its tasks fail and retry with backoff
        with pytest.raises(TransientApiError):
            resync_all()  # beat's resync meets the outage as a transient error
        time.sleep(max(0.0, 30 - (time.monotonic() - down_at)))  # the outage itself: 30 s
        proc = launcher._start(settings, apiserver)
        launcher._wait_healthy(settings, apiserver, proc)

        def all_active() -> bool:
            resync_all()  # what beat runs every interval
            return Order.objects.filter(pk__in=orders, state="active").count() == 20

        wait_for(all_active, 120, "all 20 orders to be active")
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(30)
        if launcher.running_pid(settings, apiserver) is None:
            proc = launcher._start(settings, apiserver)
            launcher._wait_healthy(settings, apiserver, proc)
        core = client.CoreV1Api(kube_cluster.api_client)
        for p in projects[1:]:
            core.delete_namespace(p.namespace, propagation_policy="Background")
    assert Order.objects.filter(organization=org).count() == 20
    for order_id in orders:
        assert OrderEvent.objects.filter(order_id=order_id, to_state="active").count() == 1
    quota = client.CoreV1Api(kube_cluster.api_client).read_namespaced_resource_quota
    for p in projects:
        hard = quota("tranche-quota", p.namespace).spec.hard
        assert hard[f"{CLASS}.deviceclass.resource.k8s.io/devices"] == "2"
