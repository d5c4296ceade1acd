"""The watcher's pure folding (`controller.watch.state`), without a cluster or a database."""

from __future__ import annotations

from controller.observe import pod_summary
from controller.watch.state import ClusterState
from tranche.observed import ClassUsage


def _claim(ns: str, name: str, cls: str, allocated: bool = False) -> dict:
    claim = {
        "metadata": {"namespace": ns, "name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": cls}}]}},
    }
    if allocated:
        claim["status"] = {"allocation": {"devices": {}}}
    return claim


def test_modified_claim_moves_from_pending_to_allocated() -> None:
    state = ClusterState()
    state.apply("claims", "ADDED", _claim("n", "c", "k"))
    assert state.usage("n") == {"k": ClassUsage(0, 1, "")}
    state.apply("claims", "MODIFIED", _claim("n", "c", "k", allocated=True))
    assert state.usage("n") == {"k": ClassUsage(1, 0, "")}


def test_namespaces_are_kept_apart_and_marked_dirty() -> None:
    state = ClusterState()
    state.apply("claims", "ADDED", _claim("a", "c", "k", allocated=True))
    state.apply("claims", "ADDED", _claim("b", "c", "k"))
    assert state.usage("a") == {"k": ClassUsage(1, 0, "")}
    assert state.usage("b") == {"k": ClassUsage(0, 1, "")}
    assert state.take_dirty() == {"a", "b"}
    assert state.take_dirty() == set()


def test_dirty_marks_given_back_survive_a_failed_write() -> None:
    """What the writer could not store (database down) is written by the next flush."""
    state = ClusterState()
    state.apply("claims", "ADDED", _claim("a", "c", "k"))
    taken = state.take_dirty()
    state.apply("claims", "ADDED", _claim("b", "c", "k"))
    state.mark_dirty(taken)
    assert state.take_dirty() == {"a", "b"}


def test_relist_forgets_objects_deleted_while_not_watching() -> None:
    state = ClusterState()
    state.apply("claims", "ADDED", _claim("gone", "c", "k", allocated=True))
    state.take_dirty()
    state.replace("claims", [_claim("kept", "c", "k", allocated=True)])
    assert state.usage("gone") == {}
    assert state.usage("kept") == {"k": ClassUsage(1, 0, "")}
    assert state.take_dirty() == {"gone", "kept"}  # both must be rewritten


def test_warning_event_explains_a_pending_claim() -> None:
    state = ClusterState()
    state.apply("claims", "ADDED", _claim("n", "c", "k"))
    state.apply("events", "ADDED", {"metadata": {"namespace": "n"}, "type": "Normal",
                                   "message": "k scheduled"})  # fmt: skip
    assert state.usage("n")["k"].pending_reason == ""
    state.apply("events", "ADDED", {"metadata": {"namespace": "n"}, "type": "Warning",
                                   "message": "cannot allocate k: no capacity"})  # fmt: skip
    assert state.usage("n")["k"].pending_reason == "cannot allocate k: no capacity"


def test_pod_summary_waits_only_for_claims_not_yet_made() -> None:
    pod = {
        "spec": {
            "resourceClaims": [
                {"name": "a", "resourceClaimTemplateName": "k"},
                {"name": "b", "resourceClaimTemplateName": "k2"},
            ]
        },
        "status": {
            "phase": "Pending",
            "resourceClaimStatuses": [{"name": "a", "resourceClaimName": "pod-a-x"}],
            "containerStatuses": [
                {"state": {"waiting": {"reason": "ContainerCreating", "message": ""}}}
            ],
        },
    }
    summary = pod_summary(pod)
    assert summary["classes"] == ["k", "k2"]
    assert summary["unclaimed_templates"] == ["k2"]
    assert summary["reason"] == "ContainerCreating"


def test_a_running_pod_adds_no_pending_slices() -> None:
    state = ClusterState()
    pod = {
        "metadata": {"namespace": "n", "name": "p"},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "k"}]},
        "status": {"phase": "Running"},
    }
    state.apply("pods", "ADDED", pod)
    assert state.usage("n") == {}


def _pod_warning(name: str, reason: str, message: str, when: str, count: int = 1) -> dict:
    return {
        "metadata": {"namespace": "n", "name": name, "creationTimestamp": "2026-12-01T00:00:00Z"},
        "involvedObject": {"kind": "Pod", "name": "train"},
        "type": "Warning", "reason": reason, "message": message,
        "lastTimestamp": when, "count": count,
    }  # fmt: skip


def test_pod_timeline_keeps_each_warning_once_with_its_latest_time() -> None:
    state = ClusterState()
    state.apply("pods", "ADDED", {"metadata": {"namespace": "n", "name": "train"},
                                 "spec": {}, "status": {"phase": "Pending"}})  # fmt: skip
    state.apply("events", "ADDED", _pod_warning("e1", "FailedScheduling", "no GPU free", "T1"))
    state.apply("events", "ADDED", _pod_warning("e2", "BackOff", "back-off pulling", "T2"))
    # the scheduler repeats e1: the same Event object, MODIFIED with a later time
    state.apply(
        "events", "MODIFIED", _pod_warning("e1", "FailedScheduling", "no GPU free", "T3", 2)
    )
    (facts,) = [p.facts for p in state.view("n").pods]
    assert facts.timeline == (
        ("T2", "BackOff", "back-off pulling"),
        ("T3", "FailedScheduling", "no GPU free"),
    )
    assert facts.events == (("BackOff", "back-off pulling"), ("FailedScheduling", "no GPU free"))
    # an events.k8s.io writer sets eventTime only; a series repeat sets lastObservedTime
    bare = _pod_warning("e3", "Failed", "x", "")
    bare.pop("lastTimestamp")
    bare["eventTime"] = "T4"
    state.apply("events", "ADDED", bare)
    bare["series"] = {"lastObservedTime": "T5", "count": 2}
    state.apply("events", "MODIFIED", bare)
    assert state.view("n").pods[0].facts.timeline[-1] == ("T5", "Failed", "x")


def test_a_deleted_pod_takes_its_timeline_with_it() -> None:
    """A pod's Warning events are kept only while the pod exists: a fleet's churn of pods must
    not grow the watcher's memory with timelines of pods long gone."""
    state = ClusterState()
    pod = {"metadata": {"namespace": "n", "name": "p"}, "status": {"phase": "Pending"}}
    warning = {
        "metadata": {"namespace": "n", "name": "p.1"},
        "type": "Warning",
        "reason": "FailedScheduling",
        "message": "0/1 nodes are available",
        "involvedObject": {"kind": "Pod", "name": "p"},
    }
    state.apply("pods", "ADDED", pod)
    state.apply("events", "ADDED", warning)
    assert [f.events for f in [p.facts for p in state.view("n").pods]] == [
        (("FailedScheduling", "0/1 nodes are available"),)
    ]
    state.apply("pods", "DELETED", pod)
    assert state.pod_events == {}
    state.apply("pods", "ADDED", pod)  # a new pod of the same name starts with no history
    assert [f.events for f in [p.facts for p in state.view("n").pods]] == [()]
