"""Browser: `make run`'s pre-flight samples give the demo's first lesson in a real chromium.

The sample registry runs as `make run` starts it (`platform.samples_argv`: the loopback registry
built from the Go proxy, the three images pushed at start), and the pre-flight worker and the
portal get `make run`'s settings for it (`platform.sample_registry_env`: allow-listed, plain
HTTP, the images named on the page). Pasting each sample's manifest from the page: the CUDA-13
style image will fail on the V100 slice with the sm_70 explanation; the sm_70 and PTX-only
images pass. Each verdict's screenshot is kept under the test's tmp dir, as the tier does.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from django.db import connection
from playwright.sync_api import expect

from deploy.local import platform
from deploy.local.celery_worker import worker_argv
from deploy.ociregistry.samples import SAMPLES, served
from portal.catalog.seed import ensure_catalogue
from tests.browser.test_tenant_journey import _sign_up
from tests.helpers.celery_worker import stop_worker
from tests.helpers.portal import free_port
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def samples_env(tmp_path_factory):
    """`make run`'s sample registry on a free port, and the settings `make run` derives from it."""
    env = {**os.environ, "TRANCHE_SAMPLE_REGISTRY_PORT": str(free_port())}
    os.environ["TRANCHE_SAMPLE_REGISTRY_PORT"] = env["TRANCHE_SAMPLE_REGISTRY_PORT"]
    try:
        argv = platform.samples_argv(tmp_path_factory.mktemp("state"))
    finally:
        del os.environ["TRANCHE_SAMPLE_REGISTRY_PORT"]
    log = tmp_path_factory.mktemp("samples") / "samples.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        host = platform.sample_registry(env)
        wait_for(lambda: served(host), 120, "the sample registry to serve the samples")
        yield {**env, **platform.sample_registry_env(env)}
    finally:
        proc.terminate()
        proc.wait(timeout=15)


@pytest.fixture
def samples_worker(samples_env, transactional_db, settings, tmp_path):
    """The pre-flight worker as `make run` starts it (threads), with `make run`'s sample env."""
    queue = f"preflight-samples-{free_port()}"
    env = {
        **samples_env, "TRANCHE_DEBUG": "1", "TRANCHE_DB_NAME": connection.settings_dict["NAME"],
        "TRANCHE_PREFLIGHT_KEY_PREFIX": settings.PREFLIGHT_KEY_PREFIX,
    }  # fmt: skip
    log = tmp_path / "worker.log"
    cmd = worker_argv(queue, name=f"{queue}@localhost", concurrency=4, pool="threads")
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_for(lambda: b"ready." in log.read_bytes(), 90, "the pre-flight worker to start")
        settings.PREFLIGHT_QUEUE = queue
        for name in ("PLAIN_HTTP_REGISTRIES", "ALLOWED_REGISTRIES", "SAMPLE_IMAGES"):
            setattr(
                settings, f"PREFLIGHT_{name}", samples_env[f"TRANCHE_PREFLIGHT_{name}"].split(",")
            )
        yield queue
    finally:
        stop_worker(proc)


def test_the_samples_of_make_run_give_the_sm70_lesson(
    new_page, samples_env, samples_worker, settings, tmp_path
):
    settings.CONTROLLER_KUBECONFIG = str(tmp_path / "no-cluster")  # the browser tier has none
    ensure_catalogue()
    page = new_page()
    _sign_up(page, "sami", "Sample Labs")
    page.get_by_role("link", name="Pre-flight", exact=True).click()
    expect(page.get_by_role("heading", name="Sample images to try")).to_be_visible()
    for sample in SAMPLES:
        image = sample.reference(platform.sample_registry(samples_env))
        item = page.locator(f'[data-sample="{image}"]')
        item.locator("summary").click()
        manifest = item.locator("pre").inner_text()
        assert f"image: {image}" in manifest
        assert "tranche-v100-8g" in manifest
        page.get_by_label("Manifest").fill(manifest)
        page.get_by_role("button", name="Check", exact=True).click()
        verdict = page.locator('[data-check="gpu_code"]')
        expect(verdict).to_have_attribute("data-level", sample.on_v100, timeout=30_000)
        page.screenshot(path=str(tmp_path / f"{sample.name}.png"), full_page=True)
        if sample.on_v100 == "will_fail":
            expect(verdict).to_contain_text("need sm_75 or newer; on a Tesla V100-PCIE-32GB")
            expect(verdict).to_contain_text("Pin an image version built for sm_70")
            expect(page.locator("[data-overall]")).to_have_text("✗ Will fail")
        else:
            expect(verdict).to_contain_text("GPU code runs on Tesla V100-PCIE-32GB")
            want = "PTX compute_70" if not sample.sass else "SASS sm_70"
            expect(verdict).to_contain_text(want)
            if not sample.sass:  # #49: the first launch waits for the driver's compile
                expect(verdict).to_contain_text(
                    "the driver compiles the PTX (compute_70) at the first launch"
                )
