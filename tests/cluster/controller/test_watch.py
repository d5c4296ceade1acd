"""The watcher turns live claims into the quota page's entitled / allocated / pending figures."""

from __future__ import annotations

from kubernetes import client

from controller.reconcile import reconcile_project
from controller.watch import Watcher
from tests.cluster.controller.conftest import wait_for

CLASS = "tranche-v100-8g"
GPU = "Tesla V100-PCIE-32GB"


def _slice(node: str) -> dict:
    device = {
        "name": "gpu-0",
        "allowMultipleAllocations": True,
        "attributes": {"productName": {"string": GPU}, "uuid": {"string": f"GPU-{node}"}},
        "capacity": {"memory": {"value": "32Gi"}, "cores": {"value": "100"}},
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu"},
        "spec": {
            "driver": "gpu.tranche.dev",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [device],
        },
    }


def test_quota_page_shows_entitled_allocated_pending(tenant, kube_cluster, fake_gpu_nodes) -> None:
    from portal.orders.selectors import quota_lines

    tenant.order(CLASS, 2)
    reconcile_project(tenant.project.pk)
    api, ns = kube_cluster.api_client, tenant.namespace
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    node = fake_gpu_nodes(1)[0]
    custom.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", _slice(node))
    watcher = Watcher(api, flush_interval=0.3)
    watcher.start()
    try:
        wait_for(
            lambda: core.read_namespaced_resource_quota("tranche-quota", ns).status.hard or {},
            20,
            "the quota status",
        )
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "llm"},
            "spec": {
                "nodeName": None,
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
        core.create_namespaced_pod(ns, pod)
        waiting = {
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
        custom.create_namespaced_custom_object(
            "resource.k8s.io", "v1", ns, "resourceclaims", waiting
        )

        def figures() -> tuple | None:
            lines = [x for x in quota_lines(tenant.project) if x.product.device_class == CLASS]
            got = (lines[0].entitled, lines[0].allocated, lines[0].pending) if lines else None
            return got if got == (2, 1, 1) else None

        wait_for(figures, 60, "quota page to show entitled 2, allocated 1, pending 1")
        assert watcher.relists["claims"] == 1  # resumed from resourceVersion, never relisted
    finally:
        watcher.stop.set()
        custom.delete_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceslices", f"{node}-gpu"
        )
