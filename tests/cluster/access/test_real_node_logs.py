"""A tenant's own image on the real node, read with the kubeconfig the portal issued them:
`kubectl logs` goes kube-apiserver -> the real kubelet -> containerd's log of the container,
and shows nvidia-smi inside it reporting the slice, and the allocation past it refused."""

from __future__ import annotations

from kubernetes import client

from controller.reconcile import reconcile_project
from tests.cluster.nodeagent.conftest import describe_pod
from tests.helpers.realnode import run_pod
from tests.helpers.skips import needs_native_sim
from tests.helpers.wait import wait_for

pytestmark = [needs_native_sim]
CLASS = "tranche-v100-8g"


def test_tenant_kubectl_logs_of_the_sample_image_on_the_real_node(
    tenant, kube_cluster, real_node, download
) -> None:
    api = kube_cluster.api_client
    tenant.order(CLASS, 1)
    reconcile_project(tenant.project.pk)
    wait_for(
        lambda: client.ResourceV1Api(api)
        .list_namespaced_resource_claim_template(tenant.namespace).items,
        30, "the project's claim template",
    )  # fmt: skip
    run_pod(api, tenant.namespace, "sample", CLASS, real_node.name,
            env={"SAMPLE_ALLOC_MIB": "10240"})  # fmt: skip
    kubectl = download(tenant.membership.user)
    (context,) = [c for c, ns in kubectl.contexts.items() if ns == tenant.namespace]

    def refused() -> str | None:
        done = kubectl("logs", "sample", context=context)
        return done.stdout if "computing with" in done.stdout else None

    out = wait_for(
        refused, 90,
        lambda: "the tenant's kubectl logs of the sample\n"
        + describe_pod(api, tenant.namespace, "sample")
        + kubectl("logs", "sample", context=context).stderr + real_node.log_tail(),
    )  # fmt: skip
    assert out.splitlines()[0] == "Tesla V100-PCIE-32GB, 8192 MiB", out
    assert "CUDA_ERROR_OUT_OF_MEMORY" in out, out
    pod = client.CoreV1Api(api).read_namespaced_pod("sample", tenant.namespace)
    assert (pod.spec.node_name, pod.status.phase) == (real_node.name, "Running")
