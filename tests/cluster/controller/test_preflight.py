"""Pre-flight against the real control plane: quota, capacity, CPU headroom, admission, lints.

The tenant's project is reconciled for real (quota, RoleBinding, policies); the dry runs act as
the tenant group; capacity comes from a ResourceSlice of one V100 and the claims allocated on it.
"""

from __future__ import annotations

import secrets
import uuid

import pytest
import yaml
from kubernetes import client

from controller.reconcile import reconcile_project
from nodeagent.discovery import GpuInfo
from nodeagent.slices import render_resource_slice
from portal.catalog.manifests import (
    ProjectRef,
    WorkloadSpec,
    render_models_volume,
    render_sample_deployment,
)
from portal.preflight.service import run_preflight

V100 = "Tesla V100-PCIE-32GB"


def sample(tenant, replicas: int = 1, annotations: dict | None = None, **workload) -> str:
    project = tenant.project
    ref = ProjectRef(project.namespace, project.organization.slug, project.slug)
    spec = tenant.products["tranche-v100-8g"].spec()
    deployment = render_sample_deployment(ref, spec, WorkloadSpec(**workload))
    deployment["spec"]["replicas"] = replicas
    if annotations:
        deployment["spec"]["template"]["metadata"]["annotations"] = annotations
    return yaml.safe_dump_all([render_models_volume(ref, WorkloadSpec(**workload)), deployment])


def verdicts(tenant, text: str, check: str):
    report = run_preflight(tenant.membership.user, tenant.project, text, scan_images=False)
    assert not [v for v in report.verdicts if v.check == "cluster"], report.verdicts
    return [v for v in report.verdicts if v.check == check]


@pytest.fixture
def one_v100(kube_cluster):
    """A ResourceSlice with one shareable V100 on a node that does not run pods."""
    node = f"preflight-{secrets.token_hex(3)}"
    gpu = GpuInfo(0, 0, V100, f"GPU-{uuid.uuid4()}", 32 * 1024**3, "7.0", "Volta", "550.54.15",
                  "12.4", 80, False)  # fmt: skip
    body = render_resource_slice(node, [gpu], generation=1)
    api = client.CustomObjectsApi(kube_cluster.api_client)
    api.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", body)
    yield node, gpu
    api.delete_cluster_custom_object(
        "resource.k8s.io", "v1", "resourceslices", body["metadata"]["name"]
    )


def fill(kube_cluster, namespace: str, node: str, device: str) -> None:
    """An allocated claim consuming the whole GPU (as the scheduler records one)."""
    api = client.CustomObjectsApi(kube_cluster.api_client)
    claim = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "whole-card"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "tranche-v100-32g", "count": 1,
            "capacity": {"requests": {"memory": "32Gi", "cores": "100"}}}}]}},
    }  # fmt: skip
    api.create_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaims", claim)
    status = {"status": {"allocation": {"devices": {"results": [{
        "request": "gpu", "driver": "gpu.tranche.dev", "pool": node, "device": device,
        "shareID": str(uuid.uuid4()), "consumedCapacity": {"memory": "32Gi", "cores": "100"},
    }]}}}}  # fmt: skip
    api.patch_namespaced_custom_object_status(
        "resource.k8s.io", "v1", namespace, "resourceclaims", "whole-card", status
    )


def test_over_gpu_quota_will_never_start(tenant) -> None:
    tenant.order("tranche-v100-8g", 1)
    reconcile_project(tenant.project.pk)
    [quota] = verdicts(tenant, sample(tenant, replicas=2), "gpu_quota")
    assert quota.level == "will_fail"
    assert quota.reason.startswith("Will never start: over your quota.")
    assert quota.figures == {"entitled": 1, "held": 0, "wanted": 2}


def test_within_quota_but_every_gpu_full_will_wait(
    tenant, kube_cluster, one_v100, namespace
) -> None:
    node, gpu = one_v100
    tenant.order("tranche-v100-8g", 1)
    reconcile_project(tenant.project.pk)
    [before] = verdicts(tenant, sample(tenant), "capacity")
    assert before.level == "ok"
    assert before.figures["free_slices"] >= 4  # 32 GiB / 8 GiB on our GPU at least

    fill(kube_cluster, namespace, node, gpu.device_name)
    [quota] = verdicts(tenant, sample(tenant), "gpu_quota")
    assert quota.level == "ok"
    [after] = verdicts(tenant, sample(tenant), "capacity")
    assert after.figures["free_slices"] == before.figures["free_slices"] - 4
    if after.figures["compatible_gpus"] == 1:  # ours is the only V100 online
        assert after.figures["free_slices"] == 0
        assert after.level == "warning"
        assert "Will wait: capacity busy" in after.reason
        assert "quota is an entitlement, not a reservation" in after.reason


def test_cpu_request_over_headroom_names_the_cpu_quota(tenant) -> None:
    tenant.order("tranche-v100-8g", 1)
    reconcile_project(tenant.project.pk)
    [cpu] = verdicts(tenant, sample(tenant, cpu_request="12"), "cpu_quota")
    assert cpu.level == "will_fail"
    assert cpu.subject == "requests.cpu of ResourceQuota tranche-quota"
    assert "the requests.cpu quota (tranche-quota) has 8 CPU left of 8 CPU" in cpu.reason
    [admission] = [v for v in verdicts(tenant, sample(tenant, cpu_request="12"), "admission")
                   if v.subject == "Deployment/llm"]  # fmt: skip
    assert admission.level == "ok"  # a Deployment is admitted; its pods are what quota refuses


def test_hand_written_claim_gets_the_policy_message(tenant) -> None:
    tenant.order("tranche-v100-8g", 1)
    reconcile_project(tenant.project.pk)
    claim = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "mine"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "tranche-v100-8g", "count": 2}}]}},
    }  # fmt: skip
    [admission] = verdicts(tenant, yaml.safe_dump(claim), "admission")
    assert admission.level == "will_fail"
    assert admission.reason.startswith("Refused: Tranche policy ")
    assert "count: 1" in admission.reason


def test_the_sample_is_admitted_and_ram_and_context_lints_show_figures(tenant) -> None:
    tenant.order("tranche-v100-8g", 1)
    reconcile_project(tenant.project.pk)
    [admitted] = [v for v in verdicts(tenant, sample(tenant), "admission")
                  if v.subject == "Deployment/llm"]  # fmt: skip
    assert admitted.level == "ok"

    small = sample(tenant, ram_request="512Mi", ram_limit="512Mi",
                   annotations={"tranche.dev/model-size": "4Gi"})  # fmt: skip
    [ram] = verdicts(tenant, small, "ram_limit")
    assert ram.level == "warning"
    assert ram.figures == {"ram_limit_mib": 512, "model_mib": 4096}

    long = sample(tenant, context_length=131072, annotations={"tranche.dev/model": "llama3.2:3b"})
    [ctx] = verdicts(tenant, long, "context_length")
    assert ctx.level == "warning"
    assert ctx.figures["slice_mib"] == 8192
    assert ctx.figures["needed_mib"] == 2048 + 14336 + 512
    assert "Lower OLLAMA_CONTEXT_LENGTH to at most 51492" in ctx.fix


def test_the_dry_run_acts_as_the_user_so_a_viewer_is_refused(tenant) -> None:
    from portal.tenants.models import Membership
    from tests.helpers.factories import add_member

    viewer = add_member(
        tenant.project.organization, f"v{secrets.token_hex(3)}", Membership.Role.VIEWER
    )
    tenant.order("tranche-v100-8g", 1)
    reconcile_project(tenant.project.pk)
    report = run_preflight(viewer, tenant.project, sample(tenant), scan_images=False)
    [deployment] = [v for v in report.verdicts if v.subject == "Deployment/llm"]
    assert deployment.level == "will_fail"
    assert deployment.reason.startswith("Refused: Your role may not do this in the project:")
    assert f"u-{viewer.username}-{viewer.pk}-1" in deployment.reason


def test_pod_security_warnings_come_back_in_the_verdict(tenant) -> None:
    tenant.order("tranche-v100-8g", 1)
    reconcile_project(tenant.project.pk)
    loose = yaml.safe_load_all(sample(tenant))
    volume, deployment = list(loose)
    pod = deployment["spec"]["template"]["spec"]
    del pod["securityContext"]
    del pod["containers"][0]["securityContext"]
    [admitted] = [v for v in verdicts(tenant, yaml.safe_dump_all([volume, deployment]), "admission")
                  if v.subject == "Deployment/llm"]  # fmt: skip
    assert admitted.level == "warning"
    assert 'would violate PodSecurity "restricted:latest"' in admitted.reason
    assert not admitted.reason.endswith('"')
