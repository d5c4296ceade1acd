"""Install the Helm chart into the cluster under test, and act as its ServiceAccounts.

`install_chart` runs `helm upgrade --install` as an operator would (pre-install hooks: the
Secret and the migrations Job; kwok plays a GPU node so the Job's pod completes and the
Deployments' and the DaemonSet's pods become ready). `token_client` asks the API server for a
real token of one of the chart's ServiceAccounts (TokenRequest) and returns a client that
authenticates with it: the API server then judges the chart's own identities.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from kubernetes import client

from deploy.tools.build import ensure_helm

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "deploy" / "chart" / "tranche"
RBAC = CHART / "rbac" / "rbac.yaml"
NAMESPACE = "tranche-system"
RELEASE = "tranche"
# The devcluster's kwok nodes carry GPU feature discovery's labels (the default node selector
# matches them) but no real kubelet: the agents simulate their GPUs. The platform's pods go to
# kwok nodes too: on the untainted real node they would wait for an image nobody imported
# (the install tier, tests/install, runs the chart there for real).
KWOK_VALUES = [
    "--set", "nodeAgent.simulate=true",
    "--set", "platform.nodeSelector.type=kwok",
    "--set", "database.host=postgres.invalid",
]  # fmt: skip


def helm(kube_cluster, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the project's helm against the cluster under test."""
    cmd = [str(ensure_helm()), f"--kubeconfig={kube_cluster.kubeconfig}", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
    if check:
        assert proc.returncode == 0, f"{' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def install_chart(kube_cluster, *extra: str) -> subprocess.CompletedProcess:
    """`helm upgrade --install` the chart into tranche-system and wait until it is ready.

    Objects that `kubectl apply -k deploy/install` made (same names, no Helm ownership) are
    removed first: Helm refuses to adopt what it did not create.
    """
    if helm(kube_cluster, "status", RELEASE, "-n", NAMESPACE, check=False).returncode != 0:
        subprocess.run(
            [*kube_cluster.kubectl, "delete", "--ignore-not-found", "--wait", "-f", str(RBAC)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    return helm(
        kube_cluster, "upgrade", "--install", RELEASE, str(CHART), "-n", NAMESPACE,
        "--create-namespace", "--wait", "--timeout", "180s", *KWOK_VALUES, *extra,
    )  # fmt: skip


def uninstall_chart(kube_cluster) -> None:
    helm(kube_cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", check=False)


def token_client(kube_cluster, service_account: str) -> client.ApiClient:
    """A client holding a real, short-lived token of `service_account` in tranche-system."""
    admin = kube_cluster.api_client
    request = {"spec": {"expirationSeconds": 3600}}
    token = (
        client.CoreV1Api(admin)
        .create_namespaced_service_account_token(service_account, NAMESPACE, request)
        .status.token
    )
    cfg = client.Configuration()
    cfg.host = admin.configuration.host
    cfg.ssl_ca_cert = admin.configuration.ssl_ca_cert
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(cfg)
