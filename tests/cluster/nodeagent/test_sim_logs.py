"""`kubectl logs` of a simulated workload: real kubectl → kube-apiserver → kubelet-lite's log
endpoint (TLS both ways with the cluster's PKI) → the workload's output, including the
allocation the core refused with CUDA_ERROR_OUT_OF_MEMORY."""

from __future__ import annotations

import secrets
import shutil
import subprocess

import pytest
from kubernetes import client

from deploy.devcluster.config import load_settings
from deploy.devcluster.nodes import create_fake_gpu_nodes, delete_fake_nodes
from tests.cluster.nodeagent.conftest import (
    agent_slices,
    create_pod,
    create_template,
    describe_pod,
)
from tests.helpers.skips import needs_native_sim
from tests.helpers.wait import wait_for

pytestmark = [needs_native_sim]


def test_kubectl_logs_shows_the_workload_output(
    kube_cluster, start_agent, products, namespace, tmp_path
):
    api = kube_cluster.api_client
    pki = load_settings().pki_dir
    tls = tmp_path / "kubelet-tls"
    tls.mkdir()
    for name in ("ca.crt", "kubelet.crt", "kubelet.key"):
        shutil.copy(pki / name, tls / name)
    node = create_fake_gpu_nodes(api, 1, prefix=f"tr-logs-{secrets.token_hex(2)}")[0]
    try:
        agent = start_agent(node, "--kubelet-tls-dir", str(tls))
        wait_for(lambda: agent_slices(api, [node]), 60, lambda: "the slice\n" + agent.log_tail())
        product = products(8192, 25)
        create_template(api, namespace, product)
        create_pod(
            api, namespace, "llm", product, nodes=[node],
            annotations={"tranche.dev/workload-memory-gib": "10",
                         "tranche.dev/workload-duty": "0.05"},
        )  # fmt: skip

        def logs() -> str | None:
            done = subprocess.run(
                [*kube_cluster.kubectl, "logs", "-n", namespace, "llm"],
                capture_output=True, text=True, timeout=20, check=False,
            )  # fmt: skip
            return done.stdout if "CUDA_ERROR_OUT_OF_MEMORY" in done.stdout else None

        out = wait_for(
            logs,
            60,
            lambda: (
                "kubectl logs to show the refused allocation\n"
                + describe_pod(api, namespace, "llm")
                + agent.log_tail()
            ),
        )
        assert '"event": "context"' in out, out
        assert '"result": "CUDA_ERROR_OUT_OF_MEMORY"' in out, out
        node_obj = client.CoreV1Api(api).read_node(node)
        assert node_obj.status.daemon_endpoints.kubelet_endpoint.port > 0
    finally:
        delete_fake_nodes(api, [node])


@pytest.mark.parametrize("tail", [1])
def test_tail_lines(tail):
    from nodeagent.sim.logserver import tail_lines

    assert tail_lines(b"a\nb\nc\n", tail) == b"c\n"
