"""The metering ledger against the real control plane: the scheduler allocates real claims to pods
on a kwok node, the watcher records them, and the ledger's slice-seconds match the lifetimes the
test itself observed within 2 s, also when the watcher was down while a claim was allocated.
"""

from __future__ import annotations

import sys
import time

from kubernetes.client.rest import ApiException

from controller.watch import Watcher
from tests.cluster.controller.test_watch import _pod, ordered_with_a_sliced_node
from tests.helpers.wait import wait_for

TOLERANCE_S = 2.0


def _claim_of(core, custom, ns: str, pod: str) -> dict | None:
    """The pod's generated claim once allocated, else None."""
    status = core.read_namespaced_pod(pod, ns).status
    for entry in (status.resource_claim_statuses or []) if status else []:
        if entry.resource_claim_name:
            claim = custom.get_namespaced_custom_object(
                "resource.k8s.io", "v1", ns, "resourceclaims", entry.resource_claim_name
            )
            if (claim.get("status") or {}).get("allocation"):
                return claim
    return None


def _gone(custom, ns: str, name: str) -> bool:
    try:
        custom.get_namespaced_custom_object("resource.k8s.io", "v1", ns, "resourceclaims", name)
    except ApiException as exc:
        return exc.status == 404
    return False


def test_ledger_matches_claim_lifetimes_across_a_watcher_restart(
    tenant, kube_cluster, fake_gpu_nodes
):
    from portal.cluster.models import UsageRecord

    api, ns, custom, core, node, resource_slice = ordered_with_a_sliced_node(
        tenant, kube_cluster, fake_gpu_nodes
    )
    wait_for(
        lambda: core.read_namespaced_resource_quota("tranche-quota", ns).status.hard or {},
        20,
        "the quota status",
    )
    seen: dict[str, dict[str, float]] = {}  # claim name -> allocated/released as the test saw

    def start(pod_name: str) -> dict:
        pod = _pod(node)
        pod["metadata"]["name"] = pod_name
        created = time.time()
        core.create_namespaced_pod(ns, pod)
        claim = wait_for(lambda: _claim_of(core, custom, ns, pod_name), 60, f"{pod_name} allocated")
        seen[claim["metadata"]["name"]] = {"created": created, "allocated": time.time()}
        return claim

    watcher = Watcher(api, flush_interval=0.3)
    watcher.start()
    try:
        first = start("llm-a")
        wait_for(
            lambda: UsageRecord.objects.filter(claim_uid=first["metadata"]["uid"]).exists(),
            20,
            "the watcher to open a usage record for llm-a",
        )
        watcher.close()  # killed: llm-b is allocated while nobody watches
        second = start("llm-b")
        watcher = Watcher(api, flush_interval=0.3)
        watcher.start()
        record_b = wait_for(
            lambda: UsageRecord.objects.filter(claim_uid=second["metadata"]["uid"]).first(),
            20,
            "the restarted watcher to open llm-b's record from the replayed history",
        )
        # found in the claims' history the restarted watcher replays from its checkpoint (before
        # its relist): with the allocation's own time
        assert record_b.opened_by == "event"
        for pod_name, claim in (("llm-a", first), ("llm-b", second)):
            seen[claim["metadata"]["name"]]["released"] = time.time()
            core.delete_namespaced_pod(pod_name, ns, grace_period_seconds=0)
        for claim in (first, second):
            name = claim["metadata"]["name"]
            wait_for(lambda n=name: _gone(custom, ns, n), 60, f"claim {name} deleted")
            seen[name]["gone"] = time.time()
        wait_for(
            lambda: (
                not UsageRecord.objects.filter(project=tenant.project, released_at=None).exists()
            ),
            20,
            "both usage records closed",
        )
    finally:
        watcher.close()
        custom.delete_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceslices", resource_slice["metadata"]["name"]
        )
    records = {r.claim_name: r for r in UsageRecord.objects.filter(project=tenant.project)}
    assert set(records) == set(seen), (records, seen)
    for name, times in seen.items():
        lifetime = times["released"] - times["allocated"]
        ledger = (records[name].released_at - records[name].allocated_at).total_seconds()
        sys.stderr.write(f"{name}: ledger {ledger:.2f} s, observed lifetime {lifetime:.2f} s\n")
        assert abs(ledger - lifetime) <= TOLERANCE_S, (name, ledger, lifetime)
        # the cluster's times have second resolution (truncated): allow 1 s before the bracket;
        # a time the watcher had to take itself (no deletionTimestamp) comes after the test saw
        # the change by the watcher's delay: allowed up to the 2 s tolerance
        allocated, released = records[name].allocated_at, records[name].released_at
        assert times["created"] - 1 <= allocated.timestamp() <= times["allocated"] + TOLERANCE_S, (
            name,
            times,
        )
        assert times["released"] - 1 <= released.timestamp() <= times["gone"] + TOLERANCE_S, (
            name,
            times,
        )


def test_claim_born_and_gone_while_no_watcher_ran_is_in_the_ledger(
    tenant, kube_cluster, fake_gpu_nodes
):
    """Issue #29 item 8: the watcher is stopped across a claim's whole life (created, allocated,
    released, deleted); the next watcher replays the claims' history from its checkpoint and
    records the claim: its allocation at the cluster's own time; its release at the deletion's
    time when the replayed history carries a deletionTimestamp (exact), else when the replay saw
    it (the de-allocation carries no time), and then the record is marked estimated."""
    from portal.cluster.models import UsageRecord

    api, ns, custom, core, node, resource_slice = ordered_with_a_sliced_node(
        tenant, kube_cluster, fake_gpu_nodes
    )
    wait_for(
        lambda: core.read_namespaced_resource_quota("tranche-quota", ns).status.hard or {},
        20,
        "the quota status",
    )
    watcher = Watcher(api, flush_interval=0.3)
    watcher.start()
    try:
        from controller.desired import claims_checkpoint

        wait_for(claims_checkpoint, 20, "the watcher's first claims checkpoint")
        watcher.close()  # nobody watches from here until the claim is gone
        pod = _pod(node)
        pod["metadata"]["name"] = "llm-brief"
        created = time.time()
        core.create_namespaced_pod(ns, pod)
        claim = wait_for(
            lambda: _claim_of(core, custom, ns, "llm-brief"), 60, "llm-brief allocated"
        )
        allocated = time.time()
        released = time.time()
        core.delete_namespaced_pod("llm-brief", ns, grace_period_seconds=0)
        name = claim["metadata"]["name"]
        wait_for(lambda: _gone(custom, ns, name), 60, f"claim {name} deleted")
        gone = time.time()
        assert not UsageRecord.objects.filter(claim_uid=claim["metadata"]["uid"]).exists()
        watcher = Watcher(api, flush_interval=0.3)
        watcher.start()
        record = wait_for(
            lambda: UsageRecord.objects.filter(
                claim_uid=claim["metadata"]["uid"], released_at__isnull=False
            ).first(),
            20,
            "the restarted watcher to record the claim it never saw",
        )
    finally:
        watcher.close()
        try:
            custom.delete_cluster_custom_object(
                "resource.k8s.io", "v1", "resourceslices", resource_slice["metadata"]["name"]
            )
        except ApiException as exc:
            if exc.status != 404:  # already gone with its node: nothing to clean
                raise
    sys.stderr.write(
        f"{name}: ledger {record.allocated_at} → {record.released_at} "
        f"(estimated={record.times_estimated}), observed {allocated - created:.2f} s to allocate, "
        f"{gone - released:.2f} s to go\n"
    )
    assert record.opened_by == "event"  # from the replayed history, not guessed by the relist
    assert created - 1 <= record.allocated_at.timestamp() <= allocated + TOLERANCE_S
    # exact: the cluster's deletion time; estimated: when the replay saw it (after the gap)
    latest = time.time() if record.times_estimated else gone + TOLERANCE_S
    assert released - 1 <= record.released_at.timestamp() <= latest
