"""Browser: paste a manifest, see the verdicts; the manifest page's button checks the sample."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from portal.catalog.seed import ensure_catalogue
from tests.browser.test_tenant_journey import _sign_up

RISKY = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: llm}
spec:
  selector: {matchLabels: {app: llm}}
  template:
    metadata:
      labels: {app: llm}
      annotations: {tranche.dev/model-size: 4Gi}
    spec:
      resourceClaims: [{name: gpu, resourceClaimTemplateName: tranche-v100-8g}]
      containers:
      - name: llm
        image: ollama/ollama:latest
        resources: {limits: {memory: 512Mi}, claims: [{name: gpu}]}
"""


def test_paste_a_manifest_and_see_the_verdicts(new_page, transactional_db, settings, tmp_path):
    settings.CONTROLLER_KUBECONFIG = str(tmp_path / "no-cluster")  # the browser tier has none
    settings.PREFLIGHT_SCAN_IMAGES = False  # never pull public images from a test
    ensure_catalogue()
    page = new_page()
    _sign_up(page, "paula", "Paste Labs")

    page.get_by_role("link", name="Pre-flight", exact=True).click()
    expect(page.get_by_role("heading", name="Check before you apply")).to_be_visible()
    page.get_by_label("Manifest").fill("kind: [")
    page.get_by_role("button", name="Check", exact=True).click()
    verdict = page.locator('[data-check="manifest"]')
    expect(verdict).to_contain_text("not valid YAML at the end of line 1")  # not line 2 of 1

    page.get_by_label("Manifest").fill(RISKY)
    page.get_by_role("button", name="Check", exact=True).click()
    ram = page.locator('[data-check="ram_limit"]')
    expect(ram).to_have_attribute("data-level", "warning")
    expect(ram).to_contain_text("RAM limit (512 MiB) is below the model it loads (4096 MiB)")
    expect(page.locator('[data-check="image_tag"]')).to_contain_text("is not pinned")
    expect(page.locator('[data-check="model_volume"]')).to_contain_text(
        "not on a persistent volume"
    )
    expect(page.locator("[data-overall]")).to_have_text("! Warning")
    expect(page.get_by_label("Manifest")).to_have_value(re.compile("ollama/ollama:latest"))


def test_check_before_you_apply_runs_the_generated_manifest(
    new_page, transactional_db, settings, tmp_path
):
    settings.CONTROLLER_KUBECONFIG = str(tmp_path / "no-cluster")
    settings.PREFLIGHT_SCAN_IMAGES = False
    products = {p.device_class: p for p in ensure_catalogue()}
    page = new_page()
    _sign_up(page, "bruno", "Button Labs")
    project_id = re.search(r"/projects/(\d+)/", page.url).group(1)
    page.goto(f"/projects/{project_id}/manifests/{products['tranche-v100-8g'].pk}/")
    page.get_by_role("button", name="Check before you apply").click()
    expect(page.get_by_role("heading", name="Check before you apply")).to_be_visible()
    expect(page.locator('[data-check="image_tag"]')).to_have_attribute("data-level", "ok")
    expect(page.locator('[data-check="model_volume"]')).to_have_attribute("data-level", "ok")
    expect(page.get_by_label("Manifest")).to_have_value(re.compile("kind: PersistentVolumeClaim"))
