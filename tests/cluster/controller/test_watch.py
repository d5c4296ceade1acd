"""The watcher turns live claims into the quota page's entitled / allocated / pending figures.

No node agent runs here: the test publishes the ResourceSlice an agent would publish for one kwok
node (the agent's own pure renderer), so the real scheduler can allocate a slice to a pod. The
figures are read the way a tenant reads them: the quota page rendered by the portal.
"""

from __future__ import annotations

import dataclasses
import html
import re

from django.test import Client
from django.urls import reverse
from kubernetes import client

from controller.reconcile import reconcile_project
from controller.watch import Watcher
from nodeagent.slices import render_resource_slice
from portal.cluster.bindings import pod_bindings
from tests.helpers.gpus import v100
from tests.helpers.wait import wait_for

CLASS = "tranche-v100-8g"
GPU = "Tesla V100-PCIE-32GB"


def _slice(node: str, node_uid: str) -> dict:
    gpu = dataclasses.replace(v100(0), uuid=f"GPU-{node}")
    # Owned by its node, so the slice goes when the fixture deletes the node.
    return render_resource_slice(node, [gpu], generation=1, node_uid=node_uid)


def _quota_row(page: str, device_class: str) -> list[str] | None:
    """Cells (text) of the slices-table row of `device_class` on the quota page, or None."""
    for row in re.findall(r"<tr>(.*?)</tr>", page, flags=re.S):
        if f"<code>{device_class}</code>" in row:
            cells = re.findall(r"<td>(.*?)</td>", row, flags=re.S)
            return [" ".join(html.unescape(re.sub(r"<[^>]+>", " ", c)).split()) for c in cells]
    return None


def _pod(node: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "llm"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": CLASS}],
            "containers": [
                {
                    "name": "llm",
                    "image": "registry.invalid/llm:1",
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }


def _waiting_claim() -> dict:
    """A claim in the documented form that no pod uses: the scheduler never allocates it."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "waiting"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": CLASS,
                            "count": 1,
                            "capacity": {"requests": {"memory": "8Gi", "cores": "25"}},
                        },
                    }
                ]
            }
        },
    }


def ordered_with_a_sliced_node(tenant, kube_cluster, fake_gpu_nodes):
    """`tenant` orders 2 x CLASS and is reconciled; one fake GPU node publishes its slice.
    Returns (api client, namespace, custom objects API, core API, node, the ResourceSlice)."""
    tenant.order(CLASS, 2)
    reconcile_project(tenant.project.pk)
    api, ns = kube_cluster.api_client, tenant.namespace
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    node = fake_gpu_nodes(1)[0]
    resource_slice = _slice(node, core.read_node(node).metadata.uid)
    custom.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", resource_slice)
    return api, ns, custom, core, node, resource_slice


def test_quota_page_shows_entitled_allocated_pending(
    tenant, make_tenant, kube_cluster, fake_gpu_nodes
) -> None:
    api, ns, custom, core, node, resource_slice = ordered_with_a_sliced_node(
        tenant, kube_cluster, fake_gpu_nodes
    )
    owner = Client()
    owner.force_login(tenant.membership.user)
    url = reverse("quota", args=[tenant.project.pk])
    # Read before the watcher starts: started first, its first flush (0.3 s) can land before
    # this request and the page rightly says 0 (a fresh-clone CI run saw exactly that).
    before = _quota_row(owner.get(url).content.decode(), CLASS)
    assert before is not None, "the quota page has no row for the product just bought"
    assert before[:3] == ["2", "not yet reported", "not yet reported"], before
    watcher = Watcher(api, flush_interval=0.3)
    watcher.start()
    try:
        wait_for(
            lambda: core.read_namespaced_resource_quota("tranche-quota", ns).status.hard or {},
            20,
            "the quota status",
        )
        core.create_namespaced_pod(ns, _pod(node))
        custom.create_namespaced_custom_object(
            "resource.k8s.io", "v1", ns, "resourceclaims", _waiting_claim()
        )

        def page_figures() -> list[str] | None:
            response = owner.get(url)
            assert response.status_code == 200, response.status_code
            row = _quota_row(response.content.decode(), CLASS)
            return row if row and row[:3] == ["2", "1", "1"] else None

        wait_for(page_figures, 60, "the quota page to show entitled 2, in use 1, pending 1")
        # The agents' ingest accepts the pod's figures only from the node it is bound to.
        key = (tenant.project.pk, "llm")
        bound = {"node": node, "uid": core.read_namespaced_pod("llm", ns).metadata.uid}
        wait_for(
            lambda: pod_bindings([key]).get(key) == bound, 20, "the watcher to record the binding"
        )
        assert watcher.relists["claims"] == 1  # resumed from resourceVersion, never relisted

        outsider = Client()
        outsider.force_login(make_tenant().membership.user)
        assert outsider.get(url).status_code == 404, "another tenant must not see this quota"
    finally:
        watcher.close()
        custom.delete_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceslices", resource_slice["metadata"]["name"]
        )
