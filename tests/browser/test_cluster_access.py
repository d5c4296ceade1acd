"""A tenant signs up in the browser, opens Cluster access from the navigation, downloads the
kubeconfig, and the real kubectl accepts it: `auth whoami` names them and the project's namespace
is theirs to read. Needs the control plane (the portal mints the token there)."""

from __future__ import annotations

import contextlib
import os
import subprocess

from kubernetes import client
from kubernetes.client.rest import ApiException
from playwright.sync_api import expect

from controller.reconcile import reconcile_project
from deploy.devcluster.config import load_settings
from portal.catalog.seed import ensure_catalogue
from portal.tenants.models import Project
from tests.browser.test_tenant_journey import _sign_up


def test_the_page_downloads_a_kubeconfig_kubectl_accepts(
    new_page,
    transactional_db,
    kube_cluster,
    settings,
    tmp_path,
):
    settings.CONTROLLER_KUBECONFIG = str(kube_cluster.kubeconfig)
    ensure_catalogue()
    page = new_page()
    _sign_up(page, "kim", "Kim Labs")
    project = Project.objects.get(organization__slug="kim-labs")
    try:
        reconcile_project(project.pk)
        page.get_by_role("link", name="Cluster access", exact=True).first.click()
        expect(page.get_by_role("heading", name="Cluster access")).to_be_visible()
        expect(page.locator("#access-projects")).to_contain_text(project.namespace)
        expect(page.locator("#kubectl-snippet")).to_contain_text("kubectl --context kim-labs/")
        with page.expect_download() as info:
            page.get_by_role("button", name="Download kubeconfig").click()
        download = info.value
        assert download.suggested_filename == "tranche-kim.kubeconfig"
        path = tmp_path / download.suggested_filename
        download.save_as(path)

        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        kubectl = [str(load_settings().kubectl), f"--kubeconfig={path}"]
        whoami = subprocess.run(
            [*kubectl, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"],
            capture_output=True, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip
        assert whoami.returncode == 0, whoami.stderr
        assert whoami.stdout.startswith(f"system:serviceaccount:{project.namespace}:u-kim-")
        pods = subprocess.run(
            [*kubectl, "get", "pods"], capture_output=True, text=True, env=env, timeout=60,
            check=False,
        )  # fmt: skip
        assert pods.returncode == 0, pods.stderr
        page.reload()
        expect(page.locator("#expires-at")).to_be_visible()
    finally:
        with contextlib.suppress(ApiException):  # gone already is fine
            client.CoreV1Api(kube_cluster.api_client).delete_namespace(project.namespace)
