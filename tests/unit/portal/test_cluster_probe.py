"""The API-server probe (portal/core/cluster.py) whose result is already in when its callback
is added: `add_done_callback` then runs the callback at once, in the caller's thread. Added
under the probe's lock, that callback's own `with _lock` hung the caller for good (a CI run sat
on /readyz for ten minutes)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from types import SimpleNamespace

from portal.core import cluster


def test_a_probe_done_before_its_callback_is_added_does_not_hang(monkeypatch):
    done: Future = Future()
    done.set_result(cluster.ClusterState(True, "the API server answers", time.monotonic()))
    monkeypatch.setattr(cluster, "_pool", SimpleNamespace(submit=lambda fn: done))
    monkeypatch.setattr(cluster, "_last", None)
    monkeypatch.setattr(cluster, "_running", None)
    answers: list[cluster.ClusterState] = []
    caller = threading.Thread(target=lambda: answers.append(cluster.cluster_answers()), daemon=True)
    caller.start()
    caller.join(5)
    assert not caller.is_alive(), "cluster_answers() hung on its own lock"
    assert answers[0].ok
    assert cluster._last is answers[0]  # _finish ran: the state is kept for the next caller
    assert cluster._running is None
