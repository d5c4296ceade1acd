"""A tenant cannot turn off the runtime's seccomp filter (issue #25: "a pod without seccomp
RuntimeDefault is refused, or gets it").

On the real control plane, as the tenant (impersonated, server-side dry runs through the whole
admission chain): `Unconfined` and `Localhost` are refused at pod and container level, in pods
and in workloads, with tranche-pod-seccomp's words; RuntimeDefault and no profile at all pass
(the real node's kubelet gives the latter RuntimeDefault: tests/cluster/nodeagent/
test_real_node.py reads Seccomp 2 inside such a container).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from controller.reconcile import reconcile_project
from tests.cluster.controller.conftest import impersonating
from tests.cluster.controller.test_admission_slice import CLASS, Fenced, _container, _pod_spec

WHY = "blocks the system calls, such as unshare and mount, with which a process could get around"


def _profile(kind: str, **extra: str) -> dict[str, Any]:
    return {"seccompProfile": {"type": kind, **extra}}


LOCALHOST = {"localhostProfile": "profiles/allow-all.json"}


@pytest.fixture
def project(tenant, kube_cluster) -> Iterator[Fenced]:
    """The tenant bought a slice; its namespace carries the policies' tenant label."""
    tenant.order(CLASS, 1)
    reconcile_project(tenant.project.pk)
    api = impersonating(kube_cluster, "alice", [f"tranche.dev:tenant:{tenant.namespace}"])
    yield Fenced(tenant.namespace, api, kube_cluster.api_client)
    api.close()


def test_pod_level_profiles_other_than_runtime_default_are_refused(project: Fenced) -> None:
    for kind, extra in (("Localhost", LOCALHOST), ("Unconfined", {})):
        spec = _pod_spec(securityContext=_profile(kind, **extra))
        # Pods: Pod Security baseline refuses Unconfined first (Kubernetes' words), Localhost
        # only this policy; workloads (Pod Security only warns there) both by this policy.
        body = project.refused("Pod", spec, "seccomp")
        if kind == "Localhost":
            assert f"asks for seccomp profile {kind}" in body, body
            assert WHY in body, body
            assert "Set securityContext.seccompProfile.type to RuntimeDefault" in body, body
        for workload in ("Deployment", "Job", "CronJob"):
            body = project.refused(workload, spec, f"asks for seccomp profile {kind}")
            assert "tranche-pod-seccomp" in body, body
            assert WHY in body, body


def test_container_level_profiles_other_than_runtime_default_are_refused(project: Fenced) -> None:
    for kind, extra in (("Unconfined", {}), ("Localhost", LOCALHOST)):
        spec = _pod_spec(_container(securityContext=_profile(kind, **extra)))
        for workload in ("Deployment", "StatefulSet"):
            body = project.refused(workload, spec, "Container(s) main ask for a seccomp profile")
            assert WHY in body, body
            assert "container's securityContext.seccompProfile.type to RuntimeDefault" in body
        init = {
            "initContainers": [_container(name="setup", securityContext=_profile(kind, **extra))]
        }
        body = project.refused("Deployment", _pod_spec(**init), "Container(s) setup ask for")
    # A container's Localhost profile under a RuntimeDefault pod still overrides it: refused.
    spec = _pod_spec(_container(securityContext=_profile("Localhost", **LOCALHOST)),
                     securityContext=_profile("RuntimeDefault"))  # fmt: skip
    project.refused("Pod", spec, "Container(s) main ask for a seccomp profile")


def test_runtime_default_or_no_profile_is_admitted(project: Fenced) -> None:
    # Loaded first (policies load asynchronously): admitted must mean judged and passed.
    project.refused("Pod", _pod_spec(securityContext=_profile("Localhost", **LOCALHOST)),
                   "asks for seccomp profile Localhost")  # fmt: skip
    default = _profile("RuntimeDefault")
    for spec in (
        _pod_spec(),
        _pod_spec(securityContext=default),
        _pod_spec(_container(securityContext=default), securityContext=default),
    ):
        for kind in ("Pod", "Deployment"):
            project.admitted(kind, spec)
