"""Which node each tenant pod is bound to, as the cluster watcher last saw it.

`record_namespace` writes, per project, the Redis hash `tranche:pods:<project_id>`:
pod name -> JSON {"phase", "reason", "node" (spec.nodeName, "" until scheduled), "uid"}. The
agents' ingest reads it so that a node can report only pods the cluster bound to that node: a
node cannot take over another node's pod rows, nor put a row on a tenant's page for a pod that
does not run on it. The hash has no expiry: the watcher rewrites it whenever the project's pods
change, so a quiet project keeps its last known bindings.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import redis

from portal.core.redisconn import shared_client
from tranche.observed import ObservedPod

POD_KEY = "tranche:pods:{project_id}"


def _redis() -> redis.Redis:
    return shared_client(5)


def write_pod_states(project_id: int, pods: Iterable[ObservedPod]) -> None:
    """Replace the project's pod states with `pods` (what `record_namespace` saw)."""
    key = POD_KEY.format(project_id=project_id)
    states = {
        p.name: json.dumps({"phase": p.phase, "reason": p.reason, "node": p.node, "uid": p.uid})
        for p in pods
    }
    pipe = _redis().pipeline()
    pipe.delete(key)
    if states:
        pipe.hset(key, mapping=states)
    pipe.execute()


def pod_bindings(project_pods: Iterable[tuple[int, str]]) -> dict[tuple[int, str], dict]:
    """(project id, pod name) -> {"node", "uid"} for the pods the watcher knows; the others are
    absent. Raises redis.RedisError when Redis cannot be asked."""
    wanted = sorted(set(project_pods))
    if not wanted:
        return {}
    pipe = _redis().pipeline()
    for project_id, pod in wanted:
        pipe.hget(POD_KEY.format(project_id=project_id), pod)
    found = {}
    for key, raw in zip(wanted, pipe.execute(), strict=True):
        if raw is not None:
            state = json.loads(raw)
            found[key] = {"node": state.get("node", ""), "uid": state.get("uid", "")}
    return found
