"""Issue #45: a workload whose pod template Pod Security `baseline` would refuse is refused at
the workload, in Pod Security's words (`tranche-pod-security`); an ExternalName Service is
refused. On the real control plane, as the tenant (impersonated, server-side dry runs through the
whole admission chain); an ordinary workload of every kind still passes (a policy that failed to
compile would fail closed and refuse it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from controller.reconcile import reconcile_project
from tests.cluster.controller.conftest import impersonating, wait_refused
from tests.cluster.controller.test_admission_slice import CLASS, Fenced, _container, _pod_spec

UNSAFE_SYSCTL = {"name": "kernel.msgmax", "value": "1"}
WORDS = 'would violate PodSecurity \\"baseline:latest\\"'


@pytest.fixture
def project(tenant, kube_cluster) -> Iterator[Fenced]:
    tenant.order(CLASS, 1)
    reconcile_project(tenant.project.pk)
    api = impersonating(kube_cluster, "alice", [f"tranche.dev:tenant:{tenant.namespace}"])
    yield Fenced(tenant.namespace, api, kube_cluster.api_client)
    api.close()


def test_workloads_pod_security_would_refuse_are_refused_in_its_words(project: Fenced) -> None:
    cases = [
        ("Deployment", _pod_spec(hostNetwork=True), "host namespaces (hostNetwork=true)"),
        ("StatefulSet", _pod_spec(hostPID=True), "host namespaces (hostPID=true)"),
        ("CronJob", _pod_spec(_container(ports=[{"containerPort": 80, "hostPort": 8080}])),
         "hostPort (containers) (main)"),
        ("Job", _pod_spec(_container(securityContext={"appArmorProfile": {"type": "Unconfined"}})),
         "forbidden AppArmor profile Unconfined (main)"),
        ("StatefulSet", _pod_spec(securityContext={"sysctls": [UNSAFE_SYSCTL]}),
         "forbidden sysctls (kernel.msgmax)"),
    ]  # fmt: skip
    for kind, spec, words in cases:
        body = project.refused(kind, spec, words)
        assert "tranche-pod-security" in body, body
        assert WORDS in body, body  # as JSON: the quotes escaped
    # (tenants may not create DaemonSets at all: RBAC, render/rbac.py)
    for kind in ("Deployment", "StatefulSet", "Job", "CronJob"):
        project.admitted(kind, _pod_spec())


def test_an_external_name_service_is_refused(project: Fenced) -> None:
    core = client.CoreV1Api(project.tenant_api)
    body = {"metadata": {"name": "db"}, "spec": {"type": "ExternalName",
            "externalName": "kubernetes.default.svc.cluster.local"}}  # fmt: skip
    refusal = wait_refused(
        lambda: core.create_namespaced_service(project.namespace, body, dry_run="All"),
        "an ExternalName Service",
        "is of type ExternalName",
    )
    assert "this platform does not offer that" in refusal
    plain = {"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"},
             "ports": [{"port": 80}]}}  # fmt: skip
    core.create_namespaced_service(project.namespace, plain, dry_run="All")
