"""The Helm chart: lint-clean, its schema refuses bad values naming the field, every object it
renders is accepted by the real API server, and `helm install` brings every component up (kwok
plays the nodes) with the hardening the chart promises."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from deploy.devcluster.nodes import create_fake_gpu_nodes, delete_fake_nodes
from deploy.tools.build import ensure_helm
from nodeagent.__main__ import parse
from tests.cluster.deploy.chart import (
    CHART,
    NAMESPACE,
    RELEASE,
    helm,
    install_chart,
    uninstall_chart,
)
from tests.helpers.wait import wait_for

PRODUCTION = ["-f", str(CHART / "values-production.yaml")]
# What the install tier (tests/install) gives on the dev cluster's real node.
REAL_NODE = [
    "--set", "platform.hostNetwork=true",
    "--set", "platform.apiServer.host=127.0.0.1", "--set", "platform.apiServer.port=17000",
    "--set", "portal.port=8070", "--set", "portal.startupSeconds=600",
    "--set", "nodeAgent.simulate=true",
]  # fmt: skip
VALUE_SETS = {"defaults": [], "production": PRODUCTION, "real-node": REAL_NODE}


def offline_helm(*args: str) -> subprocess.CompletedProcess:
    """helm without a cluster (lint, template)."""
    cmd = [str(ensure_helm()), *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)


def render(values: list[str]) -> str:
    proc = offline_helm("template", RELEASE, str(CHART), "-n", NAMESPACE,
                        "--kube-version", "1.37.2", *values)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_helm_lint_is_clean(values) -> None:
    proc = offline_helm("lint", "--strict", "-n", NAMESPACE, str(CHART), *values)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "[WARNING]" not in output
    assert "[ERROR]" not in output


@pytest.mark.parametrize(
    ("values", "field", "says"),
    [
        (["--set", "mode=production", "--set", "database.host="], "/database/host",
         "minLength"),
        ([*PRODUCTION, "--set", "database.host=null"], "/database", "missing property 'host'"),
        (["--set-string", "portal.replicas=three"], "/portal/replicas", "want integer"),
        (["--set", "colour=blue"], "colour", "not allowed"),
        (["--set", "watcher.replicas=4"], "/watcher/replicas", "maximum"),
    ],
    ids=["production-empty-db-host", "production-no-db-host", "replicas-not-a-number",
         "unknown-top-level-key", "four-watchers"],
)  # fmt: skip
def test_the_values_schema_refuses_bad_values_naming_the_field(values, field, says) -> None:
    proc = offline_helm("template", RELEASE, str(CHART), "-n", NAMESPACE,
                        "--kube-version", "1.37.2", *values)  # fmt: skip
    assert proc.returncode != 0, f"accepted {values}"
    assert field in proc.stderr, proc.stderr
    assert says in proc.stderr, proc.stderr


def test_the_chart_refuses_another_namespace() -> None:
    proc = offline_helm(
        "template", RELEASE, str(CHART), "-n", "tranche", "--kube-version", "1.37.2"
    )
    assert proc.returncode != 0
    assert "install Tranche into tranche-system" in proc.stderr


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_the_api_server_accepts_every_rendered_object(kube_cluster, values) -> None:
    core = client.CoreV1Api(kube_cluster.api_client)
    try:
        core.create_namespace({"metadata": {"name": NAMESPACE}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    manifest = render(values)
    proc = subprocess.run(
        [*kube_cluster.kubectl, "apply", "--dry-run=server", "-f", "-"],
        input=manifest, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    accepted = [line for line in proc.stdout.splitlines() if "(server dry run)" in line]
    assert len(accepted) == manifest.count("\nkind: ") + manifest.startswith("kind: ")


@pytest.fixture
def chart_release(kube_cluster):
    nodes = create_fake_gpu_nodes(kube_cluster.api_client, 1, prefix="kwok-chart")
    try:
        yield install_chart(kube_cluster)
    finally:
        uninstall_chart(kube_cluster)
        delete_fake_nodes(kube_cluster.api_client, nodes)


def test_helm_install_brings_every_component_up(kube_cluster, chart_release) -> None:
    admin = kube_cluster.api_client
    apps = client.AppsV1Api(admin)
    status = helm(kube_cluster, "status", RELEASE, "-n", NAMESPACE).stdout
    assert "STATUS: deployed" in status
    deployments = {d.metadata.name: d for d in apps.list_namespaced_deployment(NAMESPACE).items}
    components = ("portal", "portal-ingest", "worker", "preflight", "beat", "watcher")
    assert set(deployments) == {f"{RELEASE}-{c}" for c in components}
    for name, deployment in deployments.items():
        assert deployment.status.ready_replicas == deployment.spec.replicas, name
        pod = deployment.spec.template.spec
        assert pod.security_context.run_as_non_root is True, name
        assert pod.containers[0].security_context.read_only_root_filesystem is True, name
    assert deployments[f"{RELEASE}-beat"].spec.replicas == 1
    # leader-elected (the Lease guards them): a rollout starts the standby first
    assert deployments[f"{RELEASE}-watcher"].spec.strategy.type == "RollingUpdate"
    accounts = {n: d.spec.template.spec.service_account_name for n, d in deployments.items()}
    assert accounts[f"{RELEASE}-worker"] == "tranche-controller"
    assert accounts[f"{RELEASE}-watcher"] == "tranche-watcher"
    assert accounts[f"{RELEASE}-beat"] == "tranche-beat"  # its Lease, nothing else
    # pre-flight reads tenants' registries and needs no cluster identity at all
    preflight = deployments[f"{RELEASE}-preflight"].spec.template.spec
    assert preflight.automount_service_account_token is False
    # the portal calls the API as itself (token minting, pre-flight), not as `default`
    assert accounts[f"{RELEASE}-portal"] == "tranche-portal"
    assert deployments[f"{RELEASE}-portal"].spec.template.spec.automount_service_account_token in (
        None,
        True,
    )
    portal = deployments[f"{RELEASE}-portal"].spec.template.spec.containers[0]
    assert portal.liveness_probe.http_get.path == "/healthz"
    assert portal.readiness_probe.http_get.path == "/readyz?scope=portal"

    agents = apps.read_namespaced_daemon_set(f"{RELEASE}-node-agent", NAMESPACE)
    wait_for(
        lambda: (
            (agents := apps.read_namespaced_daemon_set(f"{RELEASE}-node-agent", NAMESPACE))
            and agents.status.number_ready >= 1
        ),
        60,
        "a node agent ready on the kwok GPU node",
    )
    assert agents.spec.template.spec.service_account_name == "tranche-agent"
    assert agents.spec.template.spec.host_pid is True  # the backstop is on by default

    # The pre-install hooks ran: migrations succeeded (then deleted), the Secret was made.
    events = client.CoreV1Api(admin).list_namespaced_event(NAMESPACE).items
    assert any(e.involved_object.name == f"{RELEASE}-migrate" and e.reason == "Completed"
               for e in events), "the migrations Job never completed"  # fmt: skip
    client.CoreV1Api(admin).read_namespaced_secret(f"{RELEASE}-secrets", NAMESPACE)
    policies = client.NetworkingV1Api(admin).list_namespaced_network_policy(NAMESPACE).items
    assert {p.metadata.name for p in policies} == {f"{RELEASE}-portal", f"{RELEASE}-no-ingress"}
    budgets = client.PolicyV1Api(admin).list_namespaced_pod_disruption_budget(NAMESPACE).items
    assert {b.metadata.name for b in budgets} == {f"{RELEASE}-portal", f"{RELEASE}-worker"}

    # An upgrade runs the migrations again and keeps the generated secret key.
    key = client.CoreV1Api(admin).read_namespaced_secret(f"{RELEASE}-secrets", NAMESPACE)
    install_chart(kube_cluster)
    again = client.CoreV1Api(admin).read_namespaced_secret(f"{RELEASE}-secrets", NAMESPACE)
    assert again.data["secret-key"] == key.data["secret-key"]


def _docs(manifest: str) -> dict[tuple[str, str], dict]:
    docs = [d for d in yaml.safe_load_all(manifest) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def test_real_node_values_render_host_network_api_address_and_simgpu() -> None:
    docs = _docs(render(REAL_NODE))
    portal = docs[("Deployment", f"{RELEASE}-portal")]
    spec = portal["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True
    # a surge pod would wait forever for the node's port
    assert portal["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    container = spec["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert env["KUBERNETES_SERVICE_PORT"] == "17000"
    assert container["ports"] == [{"name": "http", "containerPort": 8070}]
    assert "8070" in container["args"]
    assert container["startupProbe"]["failureThreshold"] == 300
    agent = docs[("DaemonSet", f"{RELEASE}-node-agent")]["spec"]["template"]["spec"]
    assert agent["hostNetwork"] is True
    args = agent["containers"][0]["args"]
    assert "--simulate" in args
    # the agent's own parser takes every argument the chart gives it (a retired option such as
    # kubelet-lite's would stop the DaemonSet's pods at start)
    assert args[:2] == ["-m", "nodeagent"]
    parse([a.replace("$(NODE_NAME)", "real-gpu-0") for a in args[2:]])
    assert "cp -r /usr/lib/tranche/simgpu" in agent["initContainers"][0]["command"][2]


def test_defaults_keep_the_pod_network_and_the_in_cluster_api_address() -> None:
    docs = _docs(render([]))
    for (kind, name), doc in docs.items():
        if kind not in ("Deployment", "DaemonSet", "Job"):
            continue
        spec = doc["spec"]["template"]["spec"]
        assert not spec.get("hostNetwork"), name
        for container in spec["containers"]:
            names = {e["name"] for e in container.get("env", [])}
            assert "KUBERNETES_SERVICE_HOST" not in names, name
    agent = docs[("DaemonSet", f"{RELEASE}-node-agent")]["spec"]["template"]["spec"]
    assert "--simulate" not in agent["containers"][0]["args"]
    assert "simgpu" not in agent["initContainers"][0]["command"][2]


def test_agent_metrics_stay_on_loopback_unless_a_token_guards_them() -> None:
    """#45: the agents' /metrics (every tenant's namespace and pods on the node) were served on
    all interfaces without authentication."""

    def agent_args(values: list[str]) -> list[str]:
        docs = _docs(render(values))
        spec = docs[("DaemonSet", f"{RELEASE}-node-agent")]["spec"]["template"]["spec"]
        return spec["containers"][0]["args"]

    for values in ([], REAL_NODE):
        args = agent_args(values)
        assert "--metrics-addr=127.0.0.1" in args
        assert not [a for a in args if a.startswith("--metrics-token-file")]
    token = ["--set", "monitoring.agentMetricsToken.secret=agent-metrics",
             "--set", "monitoring.podMonitor.enabled=true"]  # fmt: skip
    args = agent_args(token)
    assert "--metrics-addr=0.0.0.0" in args
    assert "--metrics-token-file=/etc/tranche/agent-metrics/metrics-token" in args
    parse([a.replace("$(NODE_NAME)", "gpu-0") for a in args[2:]])
    monitors = _docs(render(token))
    agent_monitor = monitors[("PodMonitor", f"{RELEASE}-node-agent")]["spec"]
    [endpoint] = agent_monitor["podMetricsEndpoints"]
    assert endpoint["authorization"]["credentials"] == {
        "name": "agent-metrics",
        "key": "metrics-token",
    }
    refused = offline_helm("template", RELEASE, str(CHART), "-n", NAMESPACE, "--kube-version",
                           "1.37.2", "--set", "monitoring.podMonitor.enabled=true")  # fmt: skip
    assert refused.returncode != 0
    assert "set monitoring.agentMetricsToken.secret" in refused.stderr
