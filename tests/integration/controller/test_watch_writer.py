"""The watcher's writer against the real database: what a namespace did before its project was
known to the writer is written once it is."""

from __future__ import annotations

import pytest

from controller.watch.state import ClusterState
from controller.watch.writer import UsageWriter
from tests.helpers.factories import make_tenant

pytestmark = pytest.mark.django_db(transaction=True)


def _pod(ns: str, name: str) -> dict:
    return {
        "metadata": {"namespace": ns, "name": name, "uid": f"uid-{name}"},
        "spec": {"nodeName": "node-a"},
        "status": {"phase": "Running"},
    }


def test_pods_seen_before_their_project_is_known_are_written_once_it_is() -> None:
    from portal.cluster.models import PodState

    state = ClusterState()
    writer = UsageWriter(state)
    writer.projects()  # the writer's map is read before the project exists
    _user, _org, project = make_tenant("early", "Early Org")
    state.apply("pods", "ADDED", _pod(project.namespace, "p-0"))
    assert writer.flush() == 0  # not yet known: nothing written ...
    assert not PodState.objects.filter(namespace=project.namespace).exists()
    writer._projects_at = float("-inf")  # ... until the map is read again
    assert writer.flush() == 1
    assert list(
        PodState.objects.filter(namespace=project.namespace).values_list("name", "phase")
    ) == [("p-0", "Running")]
    assert writer.flush() == 0  # written once, not again and again


def test_namespaces_of_no_project_are_not_written() -> None:
    state = ClusterState()
    writer = UsageWriter(state)
    state.apply("pods", "ADDED", _pod("kube-system", "coredns"))
    assert writer.flush() == 0
    writer._projects_at = float("-inf")
    assert writer.flush() == 0
