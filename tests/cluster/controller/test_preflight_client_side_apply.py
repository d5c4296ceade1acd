"""Pre-flight's dry run answers as `kubectl apply --dry-run=server` does, for an object first
applied with client-side `kubectl apply`.

The real kubectl (built with the cluster) creates the tenant's Deployment by client-side apply,
as the tenant (`--as` their ServiceAccount), with a RollingUpdate strategy and its
`rollingUpdate` rule. The edited file switches to `strategy: Recreate` and drops the rule:
kubectl's three-way patch clears it (the strategy's retainKeys), so
`kubectl apply --dry-run=server` accepts the file; a server-side apply of it keeps kubectl's
field ownership of the rule and is refused ("may not be specified when strategy `type` is
'Recreate'"), which pre-flight used to report as "will fail". A bad value is still refused.
"""

from __future__ import annotations

import json
import subprocess

import yaml

from controller.reconcile import reconcile_project
from portal.preflight.kube import request, tenant_identity
from tests.cluster.controller.test_preflight import sample, verdicts


def kubectl(kube_cluster, tenant, manifest: str, *args: str) -> subprocess.CompletedProcess:
    who = tenant_identity(tenant.membership.user, tenant.project.namespace).user
    return subprocess.run(
        [*kube_cluster.kubectl, f"--as={who}", "-n", tenant.project.namespace, "apply",
         "-f", "-", *args],
        input=manifest, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def edited(text: str, change) -> str:
    docs = list(yaml.safe_load_all(text))
    for doc in docs:
        if doc["kind"] == "Deployment":
            change(doc)
    return yaml.safe_dump_all(docs)


def test_an_edit_of_a_client_side_applied_deployment_is_judged_as_kubectl_would(
    kube_cluster, tenant
) -> None:
    tenant.order("tranche-v100-8g", 1)
    reconcile_project(tenant.project.pk)

    def rolling(doc: dict) -> None:
        rule = {"maxSurge": 0, "maxUnavailable": 1}  # one slice: never two pods at once
        doc["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": rule}

    first = edited(sample(tenant), rolling)
    created = kubectl(kube_cluster, tenant, first)
    assert created.returncode == 0, created.stderr

    def recreate(doc: dict) -> None:
        doc["spec"]["strategy"] = {"type": "Recreate"}

    second = edited(first, recreate)
    by_kubectl = kubectl(kube_cluster, tenant, second, "--dry-run=server")
    assert by_kubectl.returncode == 0, by_kubectl.stderr
    # What pre-flight sent before: a server-side apply of the file, as the tenant.
    [deployment] = [d for d in yaml.safe_load_all(second) if d["kind"] == "Deployment"]
    deployment["metadata"]["namespace"] = tenant.project.namespace
    path = f"/apis/apps/v1/namespaces/{tenant.project.namespace}/deployments/llm"
    by_server_side = request(
        kube_cluster.api_client, "PATCH", path, body=json.dumps(deployment),
        query=[("dryRun", "All"), ("fieldManager", "tranche-preflight"), ("force", "true")],
        identity=tenant_identity(tenant.membership.user, tenant.project.namespace),
        content_type="application/apply-patch+yaml",
    )  # fmt: skip
    assert by_server_side.status == 422
    assert "may not be specified when strategy `type` is 'Recreate'" in str(by_server_side.body)

    [admitted] = [v for v in verdicts(tenant, second, "admission") if v.subject == "Deployment/llm"]
    assert admitted.level == "ok", admitted

    # A field dropped from the file goes, as with kubectl: the container's port list removed
    # and a bad value elsewhere still refused, so the dry run is no rubber stamp.
    def bad_port(doc: dict) -> None:
        recreate(doc)
        doc["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": 70000}]

    refused_by_kubectl = kubectl(kube_cluster, tenant, edited(first, bad_port), "--dry-run=server")
    assert refused_by_kubectl.returncode != 0
    [refused] = [
        v for v in verdicts(tenant, edited(first, bad_port), "admission")
        if v.subject == "Deployment/llm"
    ]  # fmt: skip
    assert refused.level == "will_fail", refused
    assert "containerPort" in refused.reason

    # Nothing was written: the live object is still kubectl's first apply.
    live = subprocess.run(
        [*kube_cluster.kubectl, "-n", tenant.project.namespace, "get", "deployment", "llm",
         "-o", "json"], capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    assert json.loads(live.stdout)["spec"]["strategy"]["type"] == "RollingUpdate"
