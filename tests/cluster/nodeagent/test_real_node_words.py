"""What the real kubelet reports reaches the tenant in the portal's words: a 512Mi container
filling 1 GiB of host RAM on the real node ends OOMKilled, exit code 137, set by the real
kubelet (the kernel's OOM killer in the pod's memory cgroup), and the portal says so; a pod
with an unparseable image reference waits with the kubelet's InvalidImageName, and the portal
says that too. The watcher carries the pods' status to the portal's database.
"""

from __future__ import annotations

import secrets

import pytest
from kubernetes import client

from controller.watch import Watcher
from tests.cluster.nodeagent.conftest import create_template, describe_pod
from tests.helpers.realnode import run_pod, terminated
from tests.helpers.skips import needs_native_sim
from tests.helpers.wait import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), needs_native_sim]


def test_oomkilled_and_a_bad_image_in_the_portals_words(
    kube_cluster, real_node, products, make_namespace
) -> None:
    from portal.cluster.models import PodState
    from portal.tenants.models import Organization, Project

    api = kube_cluster.api_client
    product = products(8192, 25)
    ns = make_namespace()
    org = Organization.objects.create(name="Words", slug=f"words-{secrets.token_hex(3)}")
    project = Project.objects.create(organization=org, name="ML", slug="ml", namespace=ns)
    create_template(api, ns, product)
    watcher = Watcher(api, flush_interval=0.3)
    try:
        watcher.start()
        run_pod(api, ns, "greedy", product.device_class, real_node.name, args=["ram", "1024"],
                memory="512Mi")  # fmt: skip
        # No claim: the kubelet judges the image name before any container, GPU or not.
        run_pod(api, ns, "typo", "", real_node.name, image="registry.invalid/App:1")

        def context() -> str:
            return describe_pod(api, ns, "greedy") + "\n" + real_node.log_tail()

        state = wait_for(lambda: terminated(api, ns, "greedy"), 90,
                         lambda: "the container to end\n" + context())  # fmt: skip
        assert (state["reason"], state["exitCode"]) == ("OOMKilled", 137), state
        core = client.CoreV1Api(api)
        wait_for(lambda: core.read_namespaced_pod("greedy", ns).status.phase == "Failed", 10,
                 "the kubelet to mark the pod Failed (restartPolicy Never)")  # fmt: skip

        def words(name: str, reason: str) -> PodState | None:
            row = PodState.objects.filter(project=project, name=name).first()
            return row if row and row.reason == reason else None

        row = wait_for(lambda: words("greedy", "OOMKilled"), 20,
                       lambda: "the portal to say OOMKilled\n" + context())  # fmt: skip
        assert "RAM limit of 512Mi" in row.words, row.words
        assert "exit code 137" in row.words, row.words
        assert "separate from the GPU slice" in row.words, row.words

        row = wait_for(lambda: words("typo", "ImagePullError"), 60,
                       lambda: "the portal to say the image is bad\n"
                       + describe_pod(api, ns, "typo"))  # fmt: skip
        assert "InvalidImageName" in row.words, row.words
        assert "registry.invalid/App:1" in row.words, row.words
        assert "Check the image name" in row.next_step, row.next_step
    finally:
        watcher.close()
