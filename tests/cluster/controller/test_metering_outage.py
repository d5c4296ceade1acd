"""The ledger through a 30 s kube-apiserver outage while claims change: nothing lost, nothing
counted twice, every lifetime inside what the test saw (played on a private control plane, as
test_faults does, so stopping its API server disturbs no one)."""

from __future__ import annotations

import sys
import time

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from controller.apply import Applier
from controller.reconcile import reconcile_project
from controller.watch import Watcher
from deploy.devcluster import launcher
from deploy.devcluster.nodes import create_fake_gpu_nodes
from tests.cluster.controller.test_faults import OUTAGE_SECONDS
from tests.cluster.controller.test_metering import TOLERANCE_S, _claim_of, _gone
from tests.cluster.controller.test_watch import CLASS, _pod, _slice
from tests.helpers.wait import wait_for


def test_ledger_through_apiserver_outage(tenant, controller_settings, private_cluster):
    from portal.cluster.models import UsageRecord

    cluster = private_cluster
    api = config.new_client_from_config(str(cluster.kubeconfig))
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    tenant.order(CLASS, 3)
    reconcile_project(tenant.project.pk, Applier(api), platform_cached=False)
    ns = tenant.namespace
    node = create_fake_gpu_nodes(api, 1, prefix="kwok-meter")[0]
    custom.create_cluster_custom_object(
        "resource.k8s.io", "v1", "resourceslices", _slice(node, core.read_node(node).metadata.uid)
    )
    wait_for(
        lambda: core.read_namespaced_resource_quota("tranche-quota", ns).status.hard or {},
        30,
        "the quota status",
    )
    seen: dict[str, dict[str, float]] = {}
    pods: dict[str, str] = {}  # pod -> claim name

    def start(pod_name: str, timeout: float = 60) -> None:
        pod = _pod(node)
        pod["metadata"]["name"] = pod_name
        created = time.time()
        core.create_namespaced_pod(ns, pod)
        claim = wait_for(
            lambda: _claim_of(core, custom, ns, pod_name), timeout, f"{pod_name} allocated"
        )
        pods[pod_name] = claim["metadata"]["name"]
        seen[pods[pod_name]] = {"created": created, "allocated": time.time()}

    def stop(pod_name: str) -> None:
        seen[pods[pod_name]]["released"] = time.time()
        core.delete_namespaced_pod(pod_name, ns, grace_period_seconds=0)

    watcher = Watcher(api, flush_interval=0.3)
    watcher.start()
    try:
        start("llm-a")
        start("llm-b")
        stop("llm-a")  # its claim goes away around the outage
        assert launcher.stop_component(cluster, "kube-apiserver"), "kube-apiserver was not running"
        down_at = time.monotonic()
        while time.monotonic() - down_at < OUTAGE_SECONDS:  # the outage itself is the scenario
            time.sleep(1)
        launcher.start_component(cluster, "kube-apiserver")
        wait_for(lambda: _api_up(core), 60, "kube-apiserver back")
        for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
            pid = launcher.running_pid(cluster, launcher.component(cluster, name))
            sys.stderr.write(f"after the outage {name} pid={pid}\n")
        try:  # the scheduler and claim controller re-sync after the outage (slow on a busy host)
            start("llm-c", timeout=150)
        except BaseException:
            pod = core.read_namespaced_pod("llm-c", ns)
            claims = custom.list_namespaced_custom_object(
                "resource.k8s.io", "v1", ns, "resourceclaims"
            )
            sys.stderr.write(f"llm-c status: {pod.status}\nclaims: {claims}\n")
            raise
        stop("llm-b")
        stop("llm-c")
        for pod_name, claim in pods.items():
            wait_for(lambda c=claim: _gone(custom, ns, c), 90, f"claim of {pod_name} deleted")
            seen[claim]["gone"] = time.time()
        wait_for(
            lambda: (
                UsageRecord.objects.filter(project=tenant.project).count() == 3
                and not UsageRecord.objects.filter(
                    project=tenant.project, released_at=None
                ).exists()
            ),
            60,
            "three closed usage records",
        )
    finally:
        watcher.close()
    records = list(UsageRecord.objects.filter(project=tenant.project))
    assert sorted(r.claim_name for r in records) == sorted(pods.values())  # none twice, none lost
    for record in records:
        times = seen[record.claim_name]
        ledger = (record.released_at - record.allocated_at).total_seconds()
        sys.stderr.write(
            f"{record.claim_name}: ledger {ledger:.2f} s, observed "
            f"{times['released'] - times['allocated']:.2f} s (closed by {record.closed_by})\n"
        )
        allocated, released = record.allocated_at.timestamp(), record.released_at.timestamp()
        assert times["created"] - 1 <= allocated <= times["allocated"] + TOLERANCE_S, (
            record.claim_name,
            times,
        )
        assert times["released"] - 1 <= released <= times["gone"] + TOLERANCE_S, (
            record.claim_name,
            times,
        )


def _api_up(core) -> bool:
    try:
        core.list_namespace(limit=1)
    except (ApiException, OSError, Exception):
        return False
    return True
