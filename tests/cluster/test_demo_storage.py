"""The demo's storage: the sample manifest's model volume claim is bound by Kubernetes itself."""

from __future__ import annotations

from kubernetes import client

from deploy.devcluster.storage import STORAGE_CLASS, ensure_demo_volumes
from deploy.supervisor import wait_until


def test_model_volume_claim_is_bound(kube_cluster, namespace):
    api = kube_cluster.api_client
    ensure_demo_volumes(api)
    assert ensure_demo_volumes(api) == 0, "a second call must create nothing"
    storage = client.StorageV1Api(api).read_storage_class(STORAGE_CLASS)
    assert storage.metadata.annotations["storageclass.kubernetes.io/is-default-class"] == "true"

    core = client.CoreV1Api(api)
    core.create_namespaced_persistent_volume_claim(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "llm-models"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "20Gi"}},
            },
        },
    )

    def phase() -> str:
        return core.read_namespaced_persistent_volume_claim("llm-models", namespace).status.phase

    assert wait_until(lambda: phase() == "Bound", 30, 0.2), f"claim is {phase()}, not Bound"
    claim = core.read_namespaced_persistent_volume_claim("llm-models", namespace)
    assert claim.spec.storage_class_name == STORAGE_CLASS
