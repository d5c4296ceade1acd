"""docs/metrics.md's table is what the processes serve (issue #33): each process kind's
exposition, rendered by its own code with one slice, one GPU event and one request in it, is
diffed against the table (name, type, labels, which process). The real-Prometheus tier
(test_prometheus.py) checks the same rows were scraped from the running stack."""

from __future__ import annotations

import os

import pytest
from django.conf import settings
from prometheus_client import generate_latest

from tests.helpers.gpus import v100
from tests.integration.metrics.table import documented, served

pytestmark = pytest.mark.django_db

SLICE_KW = {
    "namespace": "acme-ml", "pod": "a", "claim": "c", "gpu_uuid": v100(0).uuid,
    "gpu_model": v100(0).name, "memory_used_bytes": 7, "memory_limit_bytes": 8,
    "compute_target_ratio": 0.25, "compute_used_ratio": 0.2, "rejected_allocations": 1,
    "throttled_seconds": 0.5, "busy_seconds": 12.5, "contexts": 1, "slots_in_use": 1,
    "idle_seconds": 0.0,
}  # fmt: skip


def agent_exposition() -> str:
    from nodeagent.health import HealthMonitor
    from nodeagent.metrics import AgentMetrics
    from nodeagent.slice_usage import SliceUsage
    from nodeagent.xid import classify_xid

    gpus = [v100(0), v100(1)]
    monitor = HealthMonitor(gpus)  # not started: its state is fed as its thread would
    monitor._fail(gpus[1].uuid, classify_xid(79), 79)
    metrics = AgentMetrics("node-a")
    metrics.slices.health = monitor
    metrics.slices.update([SliceUsage(**SLICE_KW)], [(gpus[0].uuid, gpus[0].name, 25)], {})
    metrics.tick.observe(0.01)
    return generate_latest(metrics.registry).decode()


def controller_expositions() -> tuple[str, str]:
    from controller import metrics

    metrics.observe_reconcile("applied", 0.2)
    metrics.observe_resync(1.0, 0)
    metrics.observe_flush(True, 0.3)
    queue = metrics.QueueCollector(settings.CELERY_BROKER_URL, "tranche-test-metrics")
    from prometheus_client import CollectorRegistry

    worker = CollectorRegistry()
    worker.register(queue)
    text = generate_latest(metrics.WORKER).decode() + generate_latest(worker).decode()
    return text, generate_latest(metrics.WATCHER).decode()


def test_the_docs_table_is_what_every_process_serves(client, world):
    client.get("/healthz")
    portal = client.get("/metrics")
    assert portal.status_code == 200
    business = client.get("/metrics/business")
    assert business.status_code == 200
    worker, watcher = controller_expositions()
    got = {
        **served(agent_exposition(), "agent"),
        **served(portal.content.decode(), "portal"),
        **served(business.content.decode(), "business"),
        **served(worker, "worker"),
        **served(watcher, "watcher"),
    }
    doc = documented()
    assert len(doc) >= 30, "docs/metrics.md's table was not found"
    assert set(got) - set(doc) == set(), "served but not in docs/metrics.md's table"
    assert set(doc) - set(got) == set(), "in docs/metrics.md's table but not served"
    for name, row in doc.items():
        assert got[name] == row, f"{name}: docs say {row}, served {got[name]}"


def test_portal_processes_sum_their_samples_under_prometheus_multiproc_dir(tmp_path):
    """Several portal processes (issue #35) share PROMETHEUS_MULTIPROC_DIR: each one's frames
    and open sockets are summed by whichever process answers /metrics."""
    import subprocess
    import sys

    from tests.helpers.portal import REPO

    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(REPO),
           "DJANGO_SETTINGS_MODULE": "tests.settings"}  # fmt: skip
    one = (
        "import os; from portal.core import request_metrics as m; m.count_frame('accepted'); "
        "m.families()['sockets'].labels('project').inc(); print(os.getpid())"
    )
    pids = [  # two portal processes, one after the other (their files stay)
        int(subprocess.run([sys.executable, "-c", one], env=env, check=True, timeout=60,
                           capture_output=True, text=True).stdout)
        for _ in range(2)
    ]  # fmt: skip
    show = "from portal.core import request_metrics as m; print(m.render().decode())"

    def render() -> str:
        return subprocess.run([sys.executable, "-c", show], env=env, check=True, timeout=60,
                              capture_output=True, text=True).stdout  # fmt: skip

    text = render()
    assert 'tranche_portal_agent_frames_total{result="accepted"} 2.0' in text
    assert 'tranche_portal_socket_connections{kind="project"} 2.0' in text
    # Whatever starts portal processes marks an exited one dead: its sockets stop counting
    # (livesum), its counted frames stay.
    from prometheus_client import multiprocess

    for pid in pids:
        multiprocess.mark_process_dead(pid, str(tmp_path))
    text = render()
    assert 'tranche_portal_agent_frames_total{result="accepted"} 2.0' in text
    assert 'tranche_portal_socket_connections{kind="project"} 2.0' not in text
