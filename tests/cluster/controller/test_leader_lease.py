"""controller.leader against the real API server: two candidates for one Lease, one holds it;
a released Lease passes on at once, a holder that stopped renewing (a crash) is replaced once
LEASE_SECONDS passed since the standby last saw the record change, and never before. The
same elector behind the chart: tests/install/test_leader.py."""

from __future__ import annotations

import time
import uuid

import pytest
from kubernetes import client

from controller import leader
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture
def namespace(kube_cluster):
    name = f"lease-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(kube_cluster.api_client)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def _holder(api, namespace: str) -> str:
    lease = client.CoordinationV1Api(api).read_namespaced_lease("tranche-test", namespace)
    return lease.spec.holder_identity or ""


def test_one_holds_a_release_passes_it_on_a_crash_after_the_lease(kube_cluster, namespace):
    api = kube_cluster.api_client
    a = leader.LeaseElector(api, "tranche-test", namespace, who="a")
    b = leader.LeaseElector(api, "tranche-test", namespace, who="b")
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    assert a.try_acquire_or_renew() is True  # renewing keeps it
    assert _holder(api, namespace) == "a"

    a.release()
    assert _holder(api, namespace) == ""
    assert b.try_acquire_or_renew() is True  # no wait for expiry after a clean stop
    assert _holder(api, namespace) == "b"

    # b "crashes": it stops renewing. a (a fresh candidate) must wait the whole lease.
    a = leader.LeaseElector(api, "tranche-test", namespace, who="a")
    seen = time.monotonic()
    assert a.try_acquire_or_renew() is False
    wait_for(a.try_acquire_or_renew, leader.LEASE_SECONDS + 5, "a to take the expired Lease")
    waited = time.monotonic() - seen
    assert waited >= leader.LEASE_SECONDS - 0.5, waited
    assert _holder(api, namespace) == "a"
    lease = client.CoordinationV1Api(api).read_namespaced_lease("tranche-test", namespace)
    assert lease.spec.lease_transitions == 2  # a -> b -> a
    print(f"\nexpired Lease taken over after {waited:.1f} s")  # noqa: T201
