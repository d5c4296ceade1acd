"""Issue #45: a workload whose pod template Pod Security `baseline` would refuse is refused at
the workload, in Pod Security's words (Kubernetes only warns there, and the pods then fail in a
ReplicaSet's events); ExternalName Services are refused. Every rendered policy is evaluated with
cel-go (tests/helpers/vapeval) against the objects a tenant would send."""

from __future__ import annotations

import copy

import pytest

from controller.render.policies import render_policies
from tests.helpers.vapeval import evaluate

APPARMOR = "container.apparmor.security.beta.kubernetes.io/"
POD = {"containers": [{"name": "app", "image": "vllm/vllm-openai:v0.6.3"}]}
WORKLOADS = {
    "Deployment": ("deployments", lambda pod: {"template": {"spec": pod}}),
    "StatefulSet": ("statefulsets", lambda pod: {"template": {"spec": pod}}),
    "DaemonSet": ("daemonsets", lambda pod: {"template": {"spec": pod}}),
    "Job": ("jobs", lambda pod: {"template": {"spec": pod}}),
    "CronJob": ("cronjobs", lambda pod: {"jobTemplate": {"spec": {"template": {"spec": pod}}}}),
}


def _policies() -> list[dict]:
    return [d for d in render_policies() if d["kind"] == "ValidatingAdmissionPolicy"]


def _denials(kind: str, pod: dict, annotations: dict | None = None) -> list[str]:
    """What every Tranche policy says to a tenant creating `kind` with pod template `pod`."""
    resource, spec_of = WORKLOADS[kind]
    spec = spec_of(pod)
    if annotations:
        template = spec.get("template") or spec["jobTemplate"]["spec"]["template"]
        template["metadata"] = {"annotations": annotations}
    obj = {"apiVersion": "v1", "kind": kind, "metadata": {"name": "web"}, "spec": spec}
    quantities = ("tranche-claim-form",)  # cel-go without the quantity library: not here
    return [
        message
        for policy in _policies()
        if policy["metadata"]["name"] not in quantities
        for message in evaluate(policy, kind, resource, obj)["denied"]
    ]


def _with(**changes) -> dict:
    pod = copy.deepcopy(POD)
    for key, value in changes.items():
        if key.startswith("container_"):
            pod["containers"][0][key.removeprefix("container_")] = value
        else:
            pod[key] = value
    return pod


@pytest.mark.parametrize("kind", list(WORKLOADS))
def test_an_ordinary_workload_passes_every_policy(kind) -> None:
    assert _denials(kind, POD) == []


@pytest.mark.parametrize(
    ("kind", "pod", "annotations", "words"),
    [
        ("Deployment", _with(hostNetwork=True), None, "host namespaces (hostNetwork=true)"),
        ("StatefulSet", _with(hostPID=True, hostIPC=True), None,
         "host namespaces (hostPID=true, hostIPC=true)"),
        ("CronJob", _with(container_ports=[{"containerPort": 80, "hostPort": 8080}]), None,
         "hostPort (containers) (app)"),
        ("Job", POD, {f"{APPARMOR}app": "unconfined"},
         f"forbidden AppArmor profile Unconfined ({APPARMOR}app)"),
        ("Deployment", _with(container_securityContext={"appArmorProfile": {"type": "Unconfined"}}),
         None, "forbidden AppArmor profile Unconfined (app)"),
        ("DaemonSet", _with(securityContext={"seLinuxOptions": {"type": "spc_t"}}), None,
         "seLinuxOptions ((pod))"),
        ("Deployment", _with(container_securityContext={"procMount": "Unmasked"}), None,
         "procMount (containers) (app)"),
        ("StatefulSet", _with(securityContext={"sysctls": [
            {"name": "net.ipv4.tcp_syncookies", "value": "1"},
            {"name": "kernel.msgmax", "value": "1"}]}), None, "forbidden sysctls (kernel.msgmax)"),
    ],
)  # fmt: skip
def test_a_workload_pod_security_would_refuse_is_refused_in_its_words(
    kind, pod, annotations, words
) -> None:
    denials = _denials(kind, pod, annotations)
    assert len(denials) == 1, denials
    assert denials[0].startswith(f'{kind} web would violate PodSecurity "baseline:latest": {words}')


@pytest.mark.parametrize(
    ("spec", "refused"),
    [
        ({"type": "ExternalName", "externalName": "portal.tranche-system.svc"}, True),
        ({"type": "ClusterIP", "ports": [{"port": 80}]}, False),
        ({"ports": [{"port": 80}]}, False),
    ],
)
def test_external_name_services_are_refused(spec, refused) -> None:
    [policy] = [p for p in _policies() if p["metadata"]["name"] == "tranche-service-exposure"]
    obj = {"metadata": {"name": "db"}, "spec": spec}
    denied = evaluate(policy, "Service", "services", obj)["denied"]
    assert bool(denied) is refused, denied
    if refused:
        assert denied[0].startswith("Service db is of type ExternalName")
