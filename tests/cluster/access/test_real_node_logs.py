"""The slice check the manifest page documents, run by the tenant on the real node and read as
the tenant: the Pod of the sample image exactly as the page renders it (only pinned to the
session's real node, which other tests' pods are kept off), applied and read with the
kubeconfig the portal issued them. `kubectl logs` goes kube-apiserver -> the real kubelet ->
containerd's log of the container: nvidia-smi inside it reports the slice, and the allocation
past it is refused. The real node's agent streams to the portal (daphne, Redis, the test
database) and the tenant's live page, open in chromium, shows the refusal within 3 s of the
line containerd logged.
"""

from __future__ import annotations

import datetime as dt
import html
import re
import time

import yaml
from django.db import connection
from django.test import Client
from django.urls import reverse
from kubernetes import client

from controller.reconcile import reconcile_project
from controller.watch import Watcher
from tests.cluster.nodeagent.conftest import describe_pod
from tests.helpers.chromium import CHROMIUM, CHROMIUM_ARGS
from tests.helpers.portal import serve_portal, signed_in_context
from tests.helpers.realnode import TOLERATION
from tests.helpers.skips import needs_native_sim
from tests.helpers.wait import wait_for

pytestmark = [needs_native_sim]
CLASS = "tranche-v100-8g"
OOM = "CUDA_ERROR_OUT_OF_MEMORY"


def _page_check_manifest(user, project, product) -> dict:
    """The slice check Pod as the manifest page shows it to `user`."""
    browser = Client()
    browser.force_login(user)
    page = browser.get(reverse("manifest", args=[project.pk, product.pk]))
    assert page.status_code == 200
    found = re.search(r'<code id="check-yaml">(.*?)</code>', page.content.decode(), re.S)
    assert found, "the manifest page shows no slice check"
    (pod,) = yaml.safe_load_all(html.unescape(found.group(1)))
    return pod


def _refused_at(timestamped: str) -> dt.datetime | None:
    """When containerd logged the first refused allocation (`kubectl logs --timestamps`)."""
    for line in timestamped.splitlines():
        stamp, _, text = line.partition(" ")
        if text.startswith("alloc ") and OOM in text:
            return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return None


def test_the_documented_slice_check_on_the_real_node(
    tenant, kube_cluster, real_node, download, *, tmp_path, monkeypatch
) -> None:
    from playwright.sync_api import sync_playwright

    from portal.agents import services

    api = kube_cluster.api_client
    project, product = tenant.project, tenant.products[CLASS]
    tenant.order(CLASS, 1)
    reconcile_project(project.pk)
    wait_for(
        lambda: client.ResourceV1Api(api)
        .list_namespaced_resource_claim_template(tenant.namespace).items,
        30, "the project's claim template",
    )  # fmt: skip
    pod = _page_check_manifest(tenant.membership.user, project, product)
    name = pod["metadata"]["name"]
    pod["spec"]["tolerations"] = [TOLERATION]
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": real_node.name}
    kubectl = download(tenant.membership.user)
    (context,) = [c for c, ns in kubectl.contexts.items() if ns == tenant.namespace]
    token_file = tmp_path / "node-token"
    token_file.write_text(services.issue_node_token(real_node.name))
    # The page's ORM-backed views and the test's ORM calls run beside Playwright's event loop.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    # The portal accepts a pod's report only from the node the watcher says it is bound to.
    watcher = Watcher(api, flush_interval=0.3)
    with (
        serve_portal(connection.settings_dict["NAME"]) as portal,
        real_node.streaming_to(portal.url, token_file),
        sync_playwright() as pw,
    ):
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        browser = signed_in_context(chromium, tenant.membership.user, portal.http_base)
        try:
            watcher.start()
            live = browser.new_page()
            live.goto(f"/projects/{project.pk}/status/")
            wait_for(lambda: live.locator("#live-status").get_attribute("data-state") == "live",
                     15, "the live page to connect")  # fmt: skip
            applied = kubectl("apply", "-f", "-", context=context, stdin=yaml.safe_dump(pod))
            assert applied.returncode == 0, applied.stderr
            assert "Warning" not in applied.stderr, applied.stderr

            def context_now() -> str:
                pod_now = describe_pod(api, tenant.namespace, name)
                return f"{pod_now}\n{real_node.log_tail()}\n--- portal ---\n{portal.log_tail()}"

            cell = live.locator("#pods tr[data-key]", has_text=name).locator(
                'td[data-field="rejected"]'
            )

            def shown() -> float | None:
                text = cell.text_content(timeout=1000) if cell.count() else ""
                return time.time() if text and text.strip() not in ("", "0") else None

            seen = wait_for(shown, 120, "the refusal on the tenant's live page",
                            context_now, interval=0.05)  # fmt: skip
            logs = kubectl("logs", "--timestamps", name, context=context)
            refused = _refused_at(logs.stdout)
            assert refused, logs.stdout + logs.stderr
            latency = seen - refused.timestamp()
            print(f"refused allocation -> tenant's live page {latency:.2f} s")  # noqa: T201
            assert latency < 3, f"the live page showed the refusal {latency:.2f} s after it"
        finally:
            watcher.close()
            browser.close()
            chromium.close()
    out = kubectl("logs", name, context=context).stdout
    print(out.split("computing with")[0])  # noqa: T201  (what the page's "Expect" shows)
    assert out.splitlines()[0] == "Tesla V100-PCIE-32GB, 8192 MiB", out
    assert re.search(rf"^alloc \d+ MiB: {OOM}$", out, re.M), out
    assert "computing with" in out, out
    running = client.CoreV1Api(api).read_namespaced_pod(name, tenant.namespace)
    assert (running.spec.node_name, running.status.phase) == (real_node.name, "Running")
