"""Pure folding of watch events into what the watcher knows; no Django, no cluster, no threads.

`ClusterState` holds, per (namespace, name), each ResourceClaim's DeviceClass and whether it is
allocated, each Pod's summary (phase, why it waits, which claim templates it still needs) and the
last Warning events per namespace. Namespaces that change are marked dirty until the writer takes
them (`take_dirty`) and either stores them or gives them back (`mark_dirty`) when the database is
down, so nothing seen during an outage is lost. Every namespace is folded, tenant or not: which
namespaces belong to projects is the writer's question (it needs the database), so a stream
thread never touches the database and a PostgreSQL restart cannot stop one.
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple

EVENTS_KEPT = 20


class ClassUsage(NamedTuple):
    """Slices of one DeviceClass in one namespace, as the quota page shows them."""

    allocated: int
    pending: int
    pending_reason: str


@dataclass
class ClusterState:
    """What the watcher knows about every namespace, keyed by (namespace, name). Thread-safe."""

    claims: dict[tuple[str, str], tuple[str, bool]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    events: dict[str, deque] = field(
        default_factory=lambda: defaultdict(lambda: deque(maxlen=EVENTS_KEPT))
    )
    dirty: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def apply(self, resource: str, kind: str, obj: dict[str, Any]) -> None:
        """Fold one watch event (ADDED/MODIFIED/DELETED) of `resource` into the state."""
        meta = obj.get("metadata", {})
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        with self.lock:
            self.dirty.add(ns)
            if resource == "claims":
                if kind == "DELETED":
                    self.claims.pop((ns, name), None)
                else:
                    self.claims[(ns, name)] = (claim_class(obj), claim_allocated(obj))
            elif resource == "pods":
                if kind == "DELETED":
                    self.pods.pop((ns, name), None)
                else:
                    self.pods[(ns, name)] = pod_summary(obj)
            elif obj.get("type") == "Warning" and kind != "DELETED":
                self.events[ns].append(obj.get("message", ""))

    def replace(self, resource: str, items: list[dict[str, Any]]) -> None:
        """A fresh LIST replaces everything known about `resource` (objects deleted while the
        watch was down disappear; their namespaces are marked dirty)."""
        with self.lock:
            if resource == "claims":
                self.dirty |= {ns for ns, _ in self.claims}
                self.claims.clear()
            elif resource == "pods":
                self.dirty |= {ns for ns, _ in self.pods}
                self.pods.clear()
        for obj in items:
            self.apply(resource, "ADDED", obj)

    def take_dirty(self) -> set[str]:
        """The namespaces changed since the last take; the caller must store or give them back."""
        with self.lock:
            dirty, self.dirty = self.dirty, set()
        return dirty

    def mark_dirty(self, namespaces: set[str]) -> None:
        with self.lock:
            self.dirty |= namespaces

    def usage(self, ns: str) -> dict[str, ClassUsage]:
        """Per DeviceClass of `ns`: allocated claims, pending slices and why they wait."""
        with self.lock:
            allocated: dict[str, int] = defaultdict(int)
            pending: dict[str, int] = defaultdict(int)
            reasons: dict[str, str] = {}
            for (cns, _), (cls, is_allocated) in self.claims.items():
                if cns == ns and cls:
                    (allocated if is_allocated else pending)[cls] += 1
            for (pns, _), pod in self.pods.items():
                if pns != ns or pod["phase"] != "Pending":
                    continue
                for cls in pod["unclaimed_templates"]:
                    pending[cls] += 1
                for cls in pod["classes"]:
                    reasons.setdefault(cls, pod["reason"])
            for message in reversed(self.events.get(ns, ())):
                for cls in set(pending) | set(allocated):
                    if cls in message and cls not in reasons:
                        reasons[cls] = message
            classes = set(allocated) | set(pending)
            return {
                c: ClassUsage(allocated[c], pending[c], reasons.get(c, "") if pending[c] else "")
                for c in classes
            }


def pod_states(state: ClusterState, ns: str) -> dict[str, dict[str, str]]:
    """Pod name -> {phase, reason, node, uid} of one namespace (for `portal.agents.bindings`)."""
    with state.lock:
        return {
            name: {k: p.get(k, "") for k in ("phase", "reason", "node", "uid")}
            for (pns, name), p in state.pods.items()
            if pns == ns
        }


def claim_class(claim: dict[str, Any]) -> str:
    """The DeviceClass a ResourceClaim asks for ("" when it asks for none we can read)."""
    requests = claim.get("spec", {}).get("devices", {}).get("requests", [])
    exactly = requests[0].get("exactly", {}) if requests else {}
    return exactly.get("deviceClassName", "")


def claim_allocated(claim: dict[str, Any]) -> bool:
    return bool(claim.get("status", {}).get("allocation"))


def pod_summary(pod: dict[str, Any]) -> dict[str, Any]:
    """Phase, why it is pending, and which template classes it still waits a claim for."""
    status = pod.get("status", {})
    reason = ""
    for cond in status.get("conditions", []):
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            reason = cond.get("message") or cond.get("reason", "")
    for cs in status.get("containerStatuses", []):
        waiting = cs.get("state", {}).get("waiting")
        if waiting and not reason:
            reason = f"{waiting.get('reason', '')}: {waiting.get('message', '')}".strip(": ")
    claims = pod.get("spec", {}).get("resourceClaims", [])
    made = {
        s.get("name") for s in status.get("resourceClaimStatuses", []) if s.get("resourceClaimName")
    }
    templates = [
        rc["resourceClaimTemplateName"] for rc in claims if rc.get("resourceClaimTemplateName")
    ]
    unclaimed = [
        rc["resourceClaimTemplateName"]
        for rc in claims
        if rc.get("resourceClaimTemplateName") and rc.get("name") not in made
    ]
    return {
        "phase": status.get("phase", "Pending"),
        "reason": reason,
        "node": pod.get("spec", {}).get("nodeName", ""),
        "uid": pod.get("metadata", {}).get("uid", ""),
        "classes": templates,
        "unclaimed_templates": unclaimed,
    }
