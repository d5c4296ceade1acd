"""The backstop asks the API server whose pod it met on a GPU without a claim: a tenant's
(namespace labelled tranche.dev/tenant=true, as the controller labels them) is stopped, the
operator's own pods are left alone, and a UID not on this node is unknown."""

from __future__ import annotations

import uuid

from kubernetes import client

from nodeagent.owners import LABEL_TENANT, TenantPods

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "registry.example/gpu-burn:1",
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                    "runAsNonRoot": True,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
            }
        ]
    },
}


def _pod_on(core: client.CoreV1Api, namespace: str, node: str) -> str:
    body = {**POD, "metadata": {"name": "burn"}, "spec": {**POD["spec"], "nodeName": node}}
    return core.create_namespaced_pod(namespace, body).metadata.uid


def test_tenancy_of_pods_on_the_node(kube_cluster, make_namespace, fake_gpu_nodes):
    (node,) = fake_gpu_nodes(1)
    core = client.CoreV1Api(kube_cluster.api_client)
    tenant_uid = _pod_on(core, make_namespace(labels={LABEL_TENANT: "true"}), node)
    operator_uid = _pod_on(core, make_namespace(), node)
    elsewhere_uid = _pod_on(core, make_namespace(labels={LABEL_TENANT: "true"}), f"{node}-other")

    tenant_pods = TenantPods(kube_cluster.api_client, node)
    assert tenant_pods(tenant_uid) is True
    assert tenant_pods(operator_uid) is False
    assert tenant_pods(elsewhere_uid) is None  # not on this node: not this agent's to judge
    assert tenant_pods(str(uuid.uuid4())) is None
