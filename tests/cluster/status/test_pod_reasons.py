"""Every reason class produced for real on the local control plane, read as the tenant reads it.

Each test makes the condition happen (a Deployment over the CPU quota, a third claim over a quota
of 2, a pod for a GPU no node has free, a Deployment asking for nvidia.com/gpu, a suspended
organization), runs the real watcher, and asserts the words on the project's live page.
"""

from __future__ import annotations

import html
import json
import re

import pytest
from django.test import Client
from django.urls import reverse
from kubernetes import client
from kubernetes.client.rest import ApiException

from controller.reconcile import reconcile_project
from controller.watch import Watcher
from tests.helpers.wait import wait_for
from tranche.pod_reasons import ADMISSION, ProjectFacts, classify_refusal

CLASS = "tranche-v100-8g"
_CPU_ROW = re.compile(r'<th scope="row">CPU</th><td>8000 m</td><td>0 m</td><td>8000 m</td>')


def _rows(page: str) -> dict[str, dict[str, str]]:
    """Live table rows by key (namespace/name): field -> text."""
    rows = {}
    for key, body in re.findall(r'<tr data-key="([^"]+)"[^>]*>(.*?)</tr>', page, flags=re.S):
        cells = re.findall(r'<td data-field="(\w+)">(.*?)</td>', body, flags=re.S)
        rows[html.unescape(key)] = {
            f: " ".join(html.unescape(re.sub(r"<[^>]+>", " ", t)).split()) for f, t in cells
        }
    return rows


def _pod(name: str, cpu: str = "100m", gpu: bool = True, extra: dict | None = None) -> dict:
    container = {
        "name": "main",
        "image": "registry.invalid/app:1",
        "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}, "limits": {"memory": "64Mi"}},
    }
    spec: dict = {"containers": [container]}
    if gpu:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": CLASS}]
        container["resources"]["claims"] = [{"name": "gpu"}]
    if extra:
        container["resources"]["limits"].update(extra)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _deployment(name: str, pod: dict) -> dict:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod["spec"]},
        },
    }


class LivePage:
    """The tenant's live page and a running watcher."""

    def __init__(self, tenant, api) -> None:
        self.tenant, self.api = tenant, api
        self.owner = Client()
        self.owner.force_login(tenant.membership.user)
        self.watcher = Watcher(api, flush_interval=0.3)

    def rows(self) -> dict[str, dict[str, str]]:
        page = self.owner.get(reverse("project_status", args=[self.tenant.project.pk]))
        assert page.status_code == 200, page.status_code
        return _rows(page.content.decode())

    def wait_reason(self, name_part: str, words: str, timeout: float = 60) -> dict[str, str]:
        def found():
            for key, row in self.rows().items():
                if name_part in key and words in row.get("reason", ""):
                    return row
            return None

        return wait_for(
            found, timeout, f"a row {name_part!r} saying {words!r}", lambda: str(self.rows())
        )


def _start(tenant, kube_cluster, quantity: int = 0) -> LivePage:
    if quantity:
        tenant.order(CLASS, quantity)
    reconcile_project(tenant.project.pk)
    core = client.CoreV1Api(kube_cluster.api_client)
    wait_for(
        lambda: core.read_namespaced_resource_quota("tranche-quota", tenant.namespace).status.used,
        30,
        "the quota's status",
    )
    page = LivePage(tenant, kube_cluster.api_client)
    page.watcher.start()
    return page


def test_cpu_quota_exhausted_by_a_deployment(tenant, kube_cluster) -> None:
    page = _start(tenant, kube_cluster)
    try:
        quota_url = reverse("quota", args=[tenant.project.pk])
        wait_for(
            lambda: _CPU_ROW.search(page.owner.get(quota_url).content.decode()),
            20,
            "the quota page to show CPU used 0 m, headroom 8000 m for a new project",
        )
        apps = client.AppsV1Api(kube_cluster.api_client)
        apps.create_namespaced_deployment(
            tenant.namespace, _deployment("big", _pod("big", cpu="9", gpu=False))
        )
        row = page.wait_reason("ReplicaSet/big", "CPU quota exhausted")
        assert "9000 m" in row["reason"], row
        assert "headroom 8000 m" in row["reason"], row
        assert row["phase"] == "NotCreated", row
    finally:
        page.watcher.close()


def test_third_claim_over_a_quota_of_two(tenant, kube_cluster) -> None:
    page = _start(tenant, kube_cluster, quantity=2)
    core = client.CoreV1Api(kube_cluster.api_client)
    try:
        for name in ("first", "second"):
            core.create_namespaced_pod(tenant.namespace, _pod(name))
        wait_for(
            lambda: (
                len(
                    client.CustomObjectsApi(kube_cluster.api_client).list_namespaced_custom_object(
                        "resource.k8s.io", "v1", tenant.namespace, "resourceclaims"
                    )["items"]
                )
                == 2
            ),
            30,
            "two claims",
        )
        core.create_namespaced_pod(tenant.namespace, _pod("third"))
        row = page.wait_reason("/third", "Over GPU quota")
        assert "your plan allows 2 x" in row["reason"], row
        assert "held by first, second" in row["reason"], row
        assert "resize" in row["reason"], row
    finally:
        page.watcher.close()


def test_capacity_busy_when_every_gpu_is_full(tenant, kube_cluster, fake_gpu_nodes) -> None:
    fake_gpu_nodes(1)  # a GPU node, but no free slice of the class anywhere
    page = _start(tenant, kube_cluster, quantity=1)
    core = client.CoreV1Api(kube_cluster.api_client)
    try:
        core.create_namespaced_pod(tenant.namespace, _pod("waits"))
        row = page.wait_reason("/waits", "Capacity busy")
        assert "entitlement, not a reservation" in row["reason"], row
        assert "Over GPU quota" not in row["reason"], row
        assert row["phase"] == "Pending", row
        quota_url = reverse("quota", args=[tenant.project.pk])
        wait_for(
            lambda: "waits: Capacity busy" in page.owner.get(quota_url).content.decode(),
            20,
            "the quota page's Pending column to say capacity busy",
        )
        # The scheduler's Warning event is on the pod's row as written: time (its eventTime,
        # with microseconds), reason, message.
        timeline = wait_for(
            lambda: next(
                (r["events"] for k, r in page.rows().items()
                 if k.endswith("/waits") and "FailedScheduling:" in r.get("events", "")),
                None,
            ),
            30,
            "the pod's FailedScheduling event on its row",
            lambda: str(page.rows()),
        )  # fmt: skip
        assert re.search(
            r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z FailedScheduling: 0/\d+ nodes", timeline
        ), timeline
    finally:
        page.watcher.close()


def test_workloads_refused_by_admission(tenant, kube_cluster) -> None:
    """A Deployment asking for nvidia.com/gpu is refused when applied (policy 1 judges
    workloads: the tenant reads the words from kubectl, and the portal's words for that
    refusal say the same); so is a Deployment whose pods break the namespace's PodSecurity
    level (hostNetwork), in PodSecurity's words."""
    page = _start(tenant, kube_cluster, quantity=1)
    apps = client.AppsV1Api(kube_cluster.api_client)
    try:
        gpu = _pod("legacy", gpu=False, extra={"nvidia.com/gpu": "1"})
        refused: ApiException | None = None
        try:
            apps.create_namespaced_deployment(tenant.namespace, _deployment("legacy", gpu))
        except ApiException as exc:
            refused = exc
        if refused is not None:
            assert refused.status == 403
            message = json.loads(refused.body)["message"]
            verdict = classify_refusal(message, ProjectFacts())
            assert verdict.reason == ADMISSION, verdict
            assert "nvidia.com/gpu" in verdict.words, verdict
            assert "claim templates" in verdict.next_step, verdict
        else:  # an older policy set judges only pods: the refusal comes as FailedCreate
            row = page.wait_reason("ReplicaSet/legacy", "Refused by the cluster's admission")
            assert "claim templates" in row["reason"], row
        host = _pod("host", gpu=False)
        host["spec"]["hostNetwork"] = True
        # Refused where it is applied (issue #45: tranche-pod-security judges the template as
        # PodSecurity would judge its pods), in PodSecurity's words, not left to FailedCreate.
        with pytest.raises(ApiException) as refused_host:
            apps.create_namespaced_deployment(tenant.namespace, _deployment("host", host))
        assert refused_host.value.status == 403
        message = json.loads(refused_host.value.body)["message"]
        assert 'would violate PodSecurity "baseline:latest"' in message, message
        assert "hostNetwork" in message, message
        verdict = classify_refusal(message, ProjectFacts())
        assert verdict.reason == ADMISSION, verdict
        assert "hostNetwork" in verdict.words, verdict
    finally:
        page.watcher.close()


def test_suspended_organization(tenant, kube_cluster) -> None:
    from portal.tenants.services import suspend_organization

    page = _start(tenant, kube_cluster, quantity=1)
    core = client.CoreV1Api(kube_cluster.api_client)
    key = f"{CLASS}.deviceclass.resource.k8s.io/devices"
    try:
        suspend_organization(
            actor=None, organization_id=tenant.project.organization_id, reason="unpaid invoice"
        )
        reconcile_project(tenant.project.pk)  # what the on-commit hint makes a worker do
        wait_for(
            lambda: (
                (
                    core.read_namespaced_resource_quota(
                        "tranche-quota", tenant.namespace
                    ).status.hard
                    or {}
                ).get(key)
                == "0"
            ),
            10,
            "the cluster quota to drop to 0",
        )
        core.create_namespaced_pod(tenant.namespace, _pod("after"))
        row = page.wait_reason("/after", "organization is suspended (unpaid invoice)")
        assert "billing" in row["reason"], row
        quota = page.owner.get(reverse("quota", args=[tenant.project.pk])).content.decode()
        assert "Your organization is suspended</strong> (unpaid invoice)" in quota
    finally:
        page.watcher.close()
