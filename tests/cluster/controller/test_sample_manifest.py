"""The manifest the portal hands a tenant is admitted as-is, without a single warning.

The seed's tenant lost hours to manifests the platform itself refused; the sample must pass the
real admission chain (RBAC as the tenant, the four policies, Pod Security, quota) unchanged.
"""

from __future__ import annotations

import subprocess

from controller.reconcile import reconcile_project
from portal.catalog.manifests import (
    ProjectRef,
    WorkloadSpec,
    render_models_volume,
    render_sample_deployment,
    to_yaml,
)


def test_sample_manifest_is_admitted_for_the_tenant_without_warnings(
    tenant, kube_cluster, tmp_path
) -> None:
    tenant.order("tranche-v100-8g", 2)
    reconcile_project(tenant.project.pk)
    project = tenant.project
    ref = ProjectRef(project.namespace, project.organization.slug, project.slug)
    product = tenant.products["tranche-v100-8g"].spec()
    manifest = tmp_path / "llm.yaml"
    manifest.write_text(
        to_yaml([render_models_volume(ref, WorkloadSpec()), render_sample_deployment(ref, product)])
    )

    res = subprocess.run(
        [*kube_cluster.kubectl, "apply", "--dry-run=server", "-f", str(manifest),
         "--as", "alice", "--as-group", f"tranche.dev:tenant:{project.namespace}",
         "--as-group", "system:authenticated"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "deployment.apps/llm created (server dry run)" in res.stdout
    assert "Warning" not in res.stderr, res.stderr


def test_the_preflight_pages_samples_are_admitted_without_warnings(
    tenant, kube_cluster, tmp_path
) -> None:
    """Issue #49: the pre-flight page's own sample manifests drew the namespace's Pod Security
    "restricted" warning, so a good image's overall verdict was "warning", never "ok"."""
    from portal.preflight.samples import sample_manifest

    tenant.order("tranche-v100-8g", 1)
    reconcile_project(tenant.project.pk)
    namespace = tenant.project.namespace
    manifest = tmp_path / "sample.yaml"
    manifest.write_text(sample_manifest("127.0.0.1:8005/samples/cuda12-sm70:1", "tranche-v100-8g"))
    res = subprocess.run(
        [*kube_cluster.kubectl, "apply", "--dry-run=server", "-n", namespace, "-f", str(manifest),
         "--as", "alice", "--as-group", f"tranche.dev:tenant:{namespace}",
         "--as-group", "system:authenticated"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "deployment.apps/gpu-sample created (server dry run)" in res.stdout
    assert "Warning" not in res.stderr, res.stderr
