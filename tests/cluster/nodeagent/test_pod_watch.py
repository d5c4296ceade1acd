"""Kubelet-lite lists its node's pods only when its watch says they changed (or every 30 s):
the watch on the real API server flags a pod bound to the node and its deletion, and keeps
flagging after the first events (one watch request, resumed from the last resourceVersion)."""

from __future__ import annotations

import secrets

from kubernetes import client

from nodeagent.sim.podwatch import PodChanges
from tests.helpers.wait import wait_for

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "spec": {"containers": [{"name": "main", "image": "busybox"}]},
}


def _pod(core, namespace: str, name: str, node: str) -> None:
    body = {**POD, "metadata": {"name": name}, "spec": {**POD["spec"], "nodeName": node}}
    core.create_namespaced_pod(namespace, body)


def _flagged(changes: PodChanges, events: int) -> bool:
    """The flag is up because of pod events (a failing watch raises it too, without events)."""
    if changes.changed.is_set() and changes.events >= events:
        changes.changed.clear()
        return True
    return False


def test_the_watch_flags_changes_of_this_nodes_pods(kube_cluster, namespace):
    core = client.CoreV1Api(kube_cluster.api_client)
    node = f"tr-watch-{secrets.token_hex(2)}"  # pods may name a node that does not exist
    changes = PodChanges(core, node)
    assert changes.changed.is_set()  # nothing listed yet: the first sync lists
    changes.start()
    try:
        changes.changed.clear()
        _pod(core, namespace, "here", node)
        wait_for(lambda: _flagged(changes, 1), 30, "the watch to flag the new pod")
        core.delete_namespaced_pod("here", namespace, grace_period_seconds=0)
        wait_for(lambda: _flagged(changes, 2), 30, "the watch to flag the deleted pod")
        _pod(core, namespace, "again", node)
        wait_for(lambda: _flagged(changes, 3), 30, "the watch to flag the next pod")
    finally:
        changes.stop()
