"""`helm install` on the real node: every platform pod Ready with the chart's probes, the
migrations Job Complete, the node agent's DRA plugin registered with the real kubelet and its
ResourceSlices published; the installed portal serves."""

from __future__ import annotations

import urllib.request

from kubernetes import client

from tests.helpers.wait import wait_for
from tests.install.installation import NAMESPACE, RELEASE, Installation

DRIVER = "gpu.tranche.dev"


def test_every_platform_pod_runs_ready_on_the_real_node(installation: Installation) -> None:
    pods = installation.pods()
    components = {p.metadata.labels["app.kubernetes.io/component"] for p in pods}
    assert {"portal", "worker", "preflight", "beat", "watcher", "node-agent"} <= components
    for pod in pods:
        assert pod.spec.node_name == installation.node.name, pod.metadata.name
        assert pod.status.phase == "Running", (pod.metadata.name, pod.status.phase)
        ready = {c.type: c.status for c in pod.status.conditions}["Ready"]
        assert ready == "True", installation.describe()
        # Started from the images `make images` built, as imported into the node.
        for st in pod.status.container_statuses:
            assert st.image.startswith("registry.tranche.dev/tranche/"), st.image
            # (the agent waited for its node token: docs/install.md step 5)
            agent = pod.metadata.labels["app.kubernetes.io/component"] == "node-agent"
            assert st.restart_count == 0 or agent, (pod.metadata.name, st.restart_count)
    portal = next(p for p in pods if p.metadata.labels["app.kubernetes.io/component"] == "portal")
    probes = portal.spec.containers[0]
    assert probes.readiness_probe.http_get.path == "/readyz?scope=portal"
    assert probes.liveness_probe.http_get.path == "/healthz"
    assert installation.timings, "the release was reused (TRANCHE_REUSE_INSTALL): no figures"
    ready = installation.timings["every platform pod Ready"]
    print(f"\nplatform pods Ready {ready:.1f} s after `helm install` started")  # noqa: T201


def test_migrations_job_completed_and_left_nothing_unapplied(installation: Installation) -> None:
    # Seen while helm ran the hook (it deletes the Job once it succeeded).
    assert "Complete" in installation.job_states[-1].split(","), installation.job_states
    out = installation.kubectl("-n", NAMESPACE, "exec", f"deploy/{RELEASE}-portal", "--",
                               "python3", "manage.py", "migrate", "--check")  # fmt: skip
    assert "unapplied" not in out.lower()


def test_agent_plugin_registered_with_the_kubelet_and_slices_published(
    installation: Installation,
) -> None:
    # The agent has no readiness probe of its own: Ready is "running"; registration follows.
    wait_for(lambda: "kubelet registered plugin gpu.tranche.dev" in installation.agent_log(), 120,
             lambda: "the kubelet to register the plugin\n" + installation.agent_log())  # fmt: skip
    resource = client.ResourceV1Api(installation.api)

    def devices() -> list:
        selector = f"spec.nodeName={installation.node.name}"
        slices = resource.list_resource_slice(field_selector=selector).items
        return [d for s in slices if s.spec.driver == DRIVER for d in s.spec.devices]

    wait_for(lambda: len(devices()) == 4, 60, "4 devices in the node's ResourceSlices")


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - http to the node only
        return resp.status, resp.read()


def test_installed_portal_answers_on_the_node(installation: Installation) -> None:
    assert _get(f"{installation.url}/readyz?scope=portal")[0] == 200
    status, body = _get(f"{installation.url}/login/")
    assert status == 200
    assert b"csrfmiddlewaretoken" in body
