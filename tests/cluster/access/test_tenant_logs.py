"""A tenant reads its simulated workload's output with real kubectl and the kubeconfig the
portal issued them: the request goes kube-apiserver → kubelet-lite's log endpoint (TLS with the
cluster's PKI both ways) and shows the allocation the core refused (CUDA_ERROR_OUT_OF_MEMORY)."""

from __future__ import annotations

import secrets
import shutil

from kubernetes import client

from controller.reconcile import reconcile_project
from deploy.devcluster.config import load_settings
from deploy.devcluster.nodes import create_fake_gpu_nodes, delete_fake_nodes
from tests.cluster.nodeagent.conftest import agent_slices, create_pod, describe_pod
from tests.helpers.skips import needs_native_sim
from tests.helpers.wait import wait_for

pytestmark = [needs_native_sim]
CLASS = "tranche-v100-8g"


def test_tenant_kubectl_logs_of_a_simulated_workload(
    tenant, kube_cluster, start_agent, download, tmp_path
) -> None:
    api = kube_cluster.api_client
    tenant.order(CLASS, 1)
    reconcile_project(tenant.project.pk)
    tls = tmp_path / "kubelet-tls"
    tls.mkdir()
    for name in ("ca.crt", "kubelet.crt", "kubelet.key"):
        shutil.copy(load_settings().pki_dir / name, tls / name)
    node = create_fake_gpu_nodes(api, 1, prefix=f"tr-tl-{secrets.token_hex(2)}")[0]
    try:
        agent = start_agent(node, "--kubelet-tls-dir", str(tls))
        wait_for(lambda: agent_slices(api, [node]), 60, lambda: "the slice\n" + agent.log_tail())
        core = client.CoreV1Api(api)
        wait_for(
            lambda: (
                core.list_namespaced_service_account(
                    tenant.namespace, field_selector="metadata.name=default"
                ).items
            ),
            30,
            "the namespace's default ServiceAccount",
        )
        create_pod(
            api, tenant.namespace, "llm", tenant.products[CLASS].spec(), nodes=[node],
            annotations={"tranche.dev/workload-memory-gib": "10",
                         "tranche.dev/workload-duty": "0.05"},
        )  # fmt: skip
        kubectl = download(tenant.membership.user)
        (context,) = [c for c, ns in kubectl.contexts.items() if ns == tenant.namespace]

        def logs() -> str | None:
            done = kubectl("logs", "llm", context=context)
            return done.stdout if "CUDA_ERROR_OUT_OF_MEMORY" in done.stdout else None

        out = wait_for(
            logs,
            60,
            lambda: (
                "the tenant's kubectl logs to show the refused allocation\n"
                + describe_pod(api, tenant.namespace, "llm")
                + kubectl("logs", "llm", context=context).stderr
                + agent.log_tail()
            ),
        )
        assert '"result": "CUDA_ERROR_OUT_OF_MEMORY"' in out, out
    finally:
        delete_fake_nodes(api, [node])
