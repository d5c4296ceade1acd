"""A tenant served end to end by the chart-installed copy: signs up on the installed portal, buys
an 8 GiB slice, downloads the kubeconfig and the manifest page's YAML, applies it with the sample
image; the pod runs on the real node under the core with its slice; the installed portal's live
page shows its memory and compute; cancel completes.

What the tenant changes in the downloaded manifest, and why: the image (the sample tenant image
the node has, `registry.tranche.dev/sample:1`, instead of Ollama, which no registry here serves),
the model volume (an emptyDir: the dev cluster's volumes are bookkeeping only and cannot be
mounted) and the CPU request (the 2-core node also runs the platform).
"""

from __future__ import annotations

import re
import time

from kubernetes import client

from tests.helpers.wait import wait_for
from tests.install.installation import Installation
from tests.install.tenant import PRODUCT, Tenant, as_tenant, seed_catalogue, tenant_manifest


def test_tenant_buys_runs_the_sample_on_the_real_node_and_cancels(
    installation: Installation, tmp_path
) -> None:
    # docs/install.md, "First product": the staff's catalogue, here the seed's V100 line.
    product_id = seed_catalogue(installation)
    tenant = Tenant(installation.url)
    project = tenant.sign_up(f"inst{int(time.time()) % 100000}", "Install Labs", "inference")
    started = time.monotonic()
    order = tenant.order(project, product_id, 1)
    wait_for(lambda: tenant.order_state(order) == "Active", 120,
             lambda: f"the order Active (is {tenant.order_state(order)!r})")  # fmt: skip
    active = time.monotonic() - started

    kubeconfig = tmp_path / "tenant.kubeconfig"
    kubeconfig.write_text(tenant.kubeconfig())
    download = tenant.request(f"/projects/{project}/manifests/{product_id}/download/")
    assert download.status == 200
    assert f"resourceClaimTemplateName: {PRODUCT}" in download.body
    as_tenant(kubeconfig, "apply", "-f", "-", stdin=tenant_manifest(download.body))

    namespace = as_tenant(kubeconfig, "config", "view", "--minify", "-o",
                           "jsonpath={..namespace}").strip()  # fmt: skip
    core = client.CoreV1Api(installation.api)

    def running_pod():
        pods = core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/name=llm")
        return next((p for p in pods.items if p.status.phase == "Running"), None)

    pod = wait_for(running_pod, 120, lambda: f"the tenant's pod Running in {namespace}\n"
                   + as_tenant(kubeconfig, "get", "pods,events", "-o", "wide"))  # fmt: skip
    running = time.monotonic() - started
    assert pod.spec.node_name == installation.node.name
    name = pod.metadata.name
    # The slice as the program inside sees it (nvidia-smi from the CDI spec, the core capping).
    wait_for(lambda: "alloc 2048 MiB" in as_tenant(kubeconfig, "logs", name), 60,
             lambda: "the allocations\n" + as_tenant(kubeconfig, "logs", name))  # fmt: skip
    logs = as_tenant(kubeconfig, "logs", name)
    assert "Tesla V100-PCIE-32GB, 8192 MiB" in logs, logs

    # The installed portal's live page, fed by the chart's agent over its websocket.
    def live_row() -> bool:
        page = tenant.request(f"/projects/{project}/status/").body
        return name in page and "/ 8192 MiB" in page

    def used_mib() -> int:
        page = tenant.request(f"/projects/{project}/status/").body
        row = page[page.find(name) :]
        match = re.search(r"(\d+) / 8192 MiB", row) if name in page else None
        return int(match.group(1)) if match else 0

    # what the program holds (2 GiB); the core's accounting may add a context's few MiB
    wait_for(lambda: used_mib() >= 2048, 60, "the pod's 2048 MiB on the live page")
    shown = time.monotonic() - started

    # Cancel: the tenant's workload goes first (a claim still allocated holds the cancel).
    as_tenant(kubeconfig, "delete", "deployment", "llm", "--wait=true")
    cancel = tenant.order(project, product_id, 0)
    wait_for(lambda: tenant.order_state(cancel) == "Cancelled", 180,
             lambda: f"the cancel complete (is {tenant.order_state(cancel)!r})")  # fmt: skip
    done = time.monotonic() - started
    print(f"\norder Active {active:.1f} s, pod Running {running:.1f} s, live figures "  # noqa: T201
          f"{shown:.1f} s, cancelled {done:.1f} s after ordering")  # fmt: skip
