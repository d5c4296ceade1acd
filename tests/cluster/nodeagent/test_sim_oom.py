"""A 512Mi pod filling 1 GiB of host RAM on a simulated GPU node ends OOMKilled, exit code 137,
in the pod's status exactly as the kubelet reports it, and the tenant's live page says so; a pod
with an unparseable image reference waits with InvalidImageName, and the page says that too.

The pod is scheduled by the real scheduler with a real allocated slice; the node agent's
kubelet-lite runs the workload in a memory cgroup with the container's limit; the kernel's OOM
killer ends it; the watcher carries the status to the portal.
"""

from __future__ import annotations

import pytest
from django.db import connection
from kubernetes import client

from controller.watch import Watcher
from deploy.devcluster.nodes import delete_fake_nodes
from nodeagent.sim import cgroups
from portal.status.models import PodState
from tests.cluster.nodeagent.conftest import (
    agent_slices,
    create_template,
    describe_pod,
    sim_project_on_a_node,
)
from tests.helpers.portal import serve_portal
from tests.helpers.skips import needs_native_sim
from tests.helpers.wait import wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    needs_native_sim,
    pytest.mark.skipif(cgroups.version() is None, reason="no memory cgroup controller"),
]


def _pod(node: str, device_class: str, image: str = "busybox") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "greedy",
            "annotations": {
                "tranche.dev/workload-host-memory-mib": "1024",
                "tranche.dev/workload-duty": "0",
            },
        },
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "resources": {
                        "requests": {"memory": "512Mi"},
                        "limits": {"memory": "512Mi"},
                        "claims": [{"name": "gpu"}],
                    },
                }
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": device_class}],
        },
    }


def test_pod_over_its_ram_limit_is_oomkilled_137_and_the_portal_says_so(
    kube_cluster, start_agent, products, namespace, tmp_path
):
    api = kube_cluster.api_client
    core = client.CoreV1Api(api)
    project, node, token_file = sim_project_on_a_node(api, namespace, tmp_path, "tr-oom")
    watcher = Watcher(api, flush_interval=0.3)
    try:
        with serve_portal(connection.settings_dict["NAME"]) as portal:
            agent = start_agent(node, "--portal", portal.url, "--token-file", str(token_file))

            def context() -> str:
                return f"{describe_pod(api, namespace, 'greedy')}\n{agent.log_tail()}"

            wait_for(lambda: agent_slices(api, [node]), 60, lambda: "the slice\n" + context())
            product = products(8192, 25)
            create_template(api, namespace, product)
            watcher.start()
            core.create_namespaced_pod(namespace, _pod(node, product.device_class))
            bad = _pod(node, product.device_class, image="registry.invalid/App:1")
            bad["metadata"]["name"] = "typo"
            core.create_namespaced_pod(namespace, bad)

            def terminated() -> dict | None:
                statuses = core.read_namespaced_pod("greedy", namespace).status.container_statuses
                for cs in statuses or []:
                    if cs.state and cs.state.terminated:
                        return cs.state.terminated.to_dict()
                return None

            done = wait_for(terminated, 60, lambda: "the container to end\n" + context())
            assert done["reason"] == "OOMKilled", done
            assert done["exit_code"] == 137, done
            assert core.read_namespaced_pod("greedy", namespace).status.phase == "Failed"

            def words() -> PodState | None:
                row = PodState.objects.filter(project=project, name="greedy").first()
                return row if row and row.reason == "OOMKilled" else None

            row = wait_for(words, 20, lambda: "the portal to say OOMKilled\n" + context())
            assert "RAM limit of 512Mi" in row.words, row.words
            assert "exit code 137" in row.words, row.words
            assert "separate from the GPU slice" in row.words, row.words

            def image_words() -> PodState | None:
                row = PodState.objects.filter(project=project, name="typo").first()
                return row if row and row.reason == "ImagePullError" else None

            row = wait_for(image_words, 30, lambda: "the portal to say the image is bad")
            assert "InvalidImageName" in row.words, row.words
            assert "registry.invalid/App:1" in row.words, row.words
            assert "Check the image name" in row.next_step, row.next_step
    finally:
        watcher.close()
        delete_fake_nodes(api, [node])
