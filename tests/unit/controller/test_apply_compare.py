"""The write-if-changed comparison and the watcher's folding of events, without a cluster."""

from __future__ import annotations

from controller.apply import _with_hash, is_current, is_subset
from controller.watch import ClusterState
from tranche.observed import ClassUsage


def _quota(hard: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "q", "namespace": "n", "labels": {"a": "b"}},
        "spec": {"hard": hard},
    }


def _live(desired: dict, **extra_meta) -> dict:
    body = _with_hash(desired)
    live = {k: v for k, v in body.items() if k not in ("apiVersion", "kind")}
    live["metadata"] = {**live["metadata"], "resourceVersion": "7", **extra_meta}
    live["status"] = {"used": {"pods": "0"}}
    return live


def test_server_added_fields_do_not_count_as_drift() -> None:
    want = _quota({"pods": "5"})
    assert is_current(want, _live(want, uid="u"))


def test_hand_edits_and_desired_changes_are_drift() -> None:
    want = _quota({"pods": "5"})
    edited = _live(want)
    edited["spec"] = {"hard": {"pods": "50"}}
    assert not is_current(want, edited)
    # a key removed from the desired object changes the hash even though it is still a subset
    assert not is_current(_quota({}), _live(want))
    assert not is_current(want, None)


def test_lists_must_match_in_length() -> None:
    assert not is_subset([1], [1, 2])
    assert is_subset([{"a": 1}], [{"a": 1, "b": 2}])


def test_watcher_counts_allocated_and_pending_per_class() -> None:
    state = ClusterState()
    claim = {
        "metadata": {"namespace": "n", "name": "c1"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "k"}}]}},
    }
    state.apply("claims", "ADDED", claim)
    state.apply(
        "claims",
        "ADDED",
        {
            **claim,
            "metadata": {"namespace": "n", "name": "c2"},
            "status": {"allocation": {"devices": {}}},
        },
    )
    pod = {
        "metadata": {"namespace": "n", "name": "p"},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "k"}]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "message": "no device"}],
        },
    }
    state.apply("pods", "ADDED", pod)
    assert state.usage("n") == {"k": ClassUsage(1, 2, "no device")}
    state.apply("claims", "DELETED", claim)
    state.apply("pods", "DELETED", pod)
    assert state.usage("n") == {"k": ClassUsage(1, 0, "")}


def test_plan_applies_only_drift_and_prunes_only_unwanted() -> None:
    from controller.apply import plan

    want, other = _quota({"pods": "5"}), {**_quota({"pods": "1"}), "metadata": {"name": "r"}}
    edited = _live(want)
    edited["spec"] = {"hard": {"pods": "50"}}
    stray = _live({**want, "metadata": {"name": "stray", "namespace": "n"}})
    key = ("v1", "ResourceQuota")
    assert plan([want], {key: {"q": _live(want)}}) == ([], [])
    assert plan([want, other], {key: {"q": edited, "stray": stray}}) == (
        [want, other],
        [("v1", "ResourceQuota", "stray", "n")],
    )
    assert plan([want], {key: {"q": _live(want), "stray": stray}}, prune=False) == ([], [])


def test_api_seconds_count_parallel_requests_once() -> None:
    """Two requests in flight together count as the span they took together, not twice: the
    server answers neither until both have arrived, so they overlap whatever the load."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from kubernetes import client

    from controller.apply import Applier

    both_arrived = threading.Barrier(2, timeout=30)

    class Paired(BaseHTTPRequestHandler):
        def do_GET(self):
            both_arrived.wait()
            body = b'{"items": []}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Paired)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    spans: list[tuple[float, float]] = []
    conf = client.Configuration(host=f"http://127.0.0.1:{server.server_port}")
    applier = Applier(client.ApiClient(conf))

    def read() -> None:
        began = time.perf_counter()
        applier.list_managed("v1", "ConfigMap", "ns")
        spans.append((began, time.perf_counter()))

    try:
        readers = [threading.Thread(target=read) for _ in range(2)]
        for r in readers:
            r.start()
        for r in readers:
            r.join()
    finally:
        server.shutdown()
    assert applier.calls["list"] == 2
    together = max(end for _, end in spans) - min(start for start, _ in spans)
    each = sum(end - start for start, end in spans)
    assert applier.api_seconds <= together
    assert applier.api_seconds < each
