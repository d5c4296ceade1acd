"""Command lines and health probes of each control-plane component.

Pure functions of `Settings`: no processes are started here, so the flags can
be read (and reviewed) in one place. The launcher starts the components in the
order of `COMPONENTS` and waits for each probe before starting the next group.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

from deploy.devcluster.config import FAKE_NODE_LABEL, FEATURE_GATES, Settings
from deploy.devcluster.pki import ADMIN, CONTROLLER_MANAGER, SCHEDULER, ClientIdentity

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # first address of SERVICE_CIDR, named in the serving cert
POD_CIDR = "10.244.0.0/16"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


@dataclass(frozen=True)
class Probe:
    """An HTTP(S) health endpoint; `client` selects the certificate used to call it."""

    url: str
    client: ClientIdentity | None = None


@dataclass(frozen=True)
class Component:
    """One process: its argv, extra environment and readiness probe."""

    name: str
    argv: list[str]
    probe: Probe
    env: dict[str, str]


def _gates() -> str:
    return ",".join(f"{name}={str(on).lower()}" for name, on in FEATURE_GATES.items())


def kubeconfig_text(settings: Settings, client: ClientIdentity) -> str:
    """A kubeconfig for `client` with certificates embedded, usable from any folder."""
    pki = settings.pki_dir

    def b64(name: str) -> str:
        return base64.b64encode((pki / name).read_bytes()).decode()

    return f"""apiVersion: v1
kind: Config
clusters:
- name: tranche-dev
  cluster:
    server: {settings.server_url}
    certificate-authority-data: {b64("ca.crt")}
users:
- name: {client.user}
  user:
    client-certificate-data: {b64(f"{client.stem}.crt")}
    client-key-data: {b64(f"{client.stem}.key")}
contexts:
- name: tranche-dev
  context:
    cluster: tranche-dev
    user: {client.user}
current-context: tranche-dev
"""


def client_kubeconfig(settings: Settings, client: ClientIdentity) -> Path:
    """Path of the kubeconfig a component uses (the admin one is `settings.kubeconfig`)."""
    if client == ADMIN:
        return settings.kubeconfig
    return settings.run_dir / f"{client.stem}.kubeconfig"


def _etcd(s: Settings) -> Component:
    client = f"http://127.0.0.1:{s.ports.etcd_client}"
    peer = f"http://127.0.0.1:{s.ports.etcd_peer}"
    argv = [
        str(s.bin_dir / "etcd"),
        "--name=tranche-dev",
        f"--data-dir={s.etcd_data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=tranche-dev={peer}",
        "--initial-cluster-state=new",
        # A throwaway dev store: fsync per write costs seconds on slow CI disks.
        "--unsafe-no-fsync=true",
        "--quota-backend-bytes=2147483648",
        "--log-level=warn",
    ]
    return Component("etcd", argv, Probe(f"{client}/health"), {})


def _apiserver(s: Settings) -> Component:
    pki = s.pki_dir
    argv = [
        str(s.bin_dir / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{s.ports.etcd_client}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={s.ports.apiserver}",
        f"--cert-dir={pki}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        # `kubectl logs`/`exec`: the API server calls the real nodes' kubelets with the PKI
        f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
        f"--kubelet-certificate-authority={pki / 'ca.crt'}",
        "--kubelet-preferred-address-types=InternalIP",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-account-issuer={SA_ISSUER}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # Node: the real nodes' kubelets (system:node:<name>) read only their own pods' objects.
        "--authorization-mode=Node,RBAC",
        # Defaults already include these; naming them documents what Tranche
        # relies on and fails loudly if a release renames one.
        "--enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,NodeRestriction,"
        "ResourceQuota,ValidatingAdmissionPolicy,MutatingAdmissionWebhook,"
        "ValidatingAdmissionWebhook,DefaultStorageClass",
        "--runtime-config=resource.k8s.io/v1=true",
        f"--feature-gates={_gates()}",
        "--allow-privileged=true",
        # No kubelet answers on 127.0.0.1, and Endpoints refuse loopback
        # addresses: skip publishing the `kubernetes` Service endpoints.
        "--endpoint-reconciler-type=none",
        "--enable-priority-and-fairness=false",
        "--v=1",
    ]
    probe = Probe(f"{s.server_url}/readyz", ADMIN)
    return Component("kube-apiserver", argv, probe, {})


UNSCHEDULABLE_RETRY = "20s"


def _client_rate(s: Settings) -> list[str]:
    """API client rate flags of the controller manager and scheduler (none: their defaults)."""
    if not s.client_qps:
        return []
    return [f"--kube-api-qps={s.client_qps}", f"--kube-api-burst={2 * s.client_qps}"]


def _controller_manager(s: Settings) -> Component:
    pki = s.pki_dir
    kubeconfig = client_kubeconfig(s, CONTROLLER_MANAGER)
    argv = [
        str(s.bin_dir / "kube-controller-manager"),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={s.ports.controller_manager}",
        f"--cert-dir={s.run_dir / 'kcm-certs'}",
        "--leader-elect=false",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        f"--cluster-signing-cert-file={pki / 'ca.crt'}",
        f"--cluster-signing-key-file={pki / 'ca.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        f"--cluster-cidr={POD_CIDR}",
        "--controllers=*",
        f"--feature-gates={_gates()}",
        "--v=1",
        *_client_rate(s),
    ]
    probe = Probe(f"https://127.0.0.1:{s.ports.controller_manager}/healthz")
    return Component("kube-controller-manager", argv, probe, {})


def _scheduler(s: Settings) -> Component:
    kubeconfig = client_kubeconfig(s, SCHEDULER)
    argv = [
        str(s.bin_dir / "kube-scheduler"),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={s.ports.scheduler}",
        f"--cert-dir={s.run_dir / 'scheduler-certs'}",
        "--leader-elect=false",
        f"--feature-gates={_gates()}",
        "--v=1",
        # v1.37.2 now and then refuses a share of a device that has room for it when several
        # pods share it at once (docs/devcluster.md); the pod is retried only when it leaves
        # the unschedulable queue, after 5 minutes by default. bench/scale.py: 64 pods on 2
        # nodes, 63 allocated in 2 s, the last after 320 s. 20 s bounds that wait.
        f"--pod-max-in-unschedulable-pods-duration={UNSCHEDULABLE_RETRY}",
        *_client_rate(s),
    ]
    probe = Probe(f"https://127.0.0.1:{s.ports.scheduler}/healthz")
    return Component("kube-scheduler", argv, probe, {})


def _kwok(s: Settings) -> Component:
    key, value = FAKE_NODE_LABEL
    argv = [
        str(s.bin_dir / "kwok"),
        f"--kubeconfig={s.kubeconfig}",
        f"--config={s.run_dir / 'kwok.yaml'}",
        f"--manage-nodes-with-label-selector={key}={value}",
        "--node-ip=127.0.0.1",
        f"--server-address=127.0.0.1:{s.ports.kwok}",
        "--node-lease-duration-seconds=40",
        f"--cidr={POD_CIDR}",
    ]
    # kwok also reads ~/.kwok/kwok.yaml when present: a private HOME keeps a
    # developer's own kwok settings out of the test cluster.
    env = {"HOME": str(s.run_dir / "kwok-home")}
    return Component("kwok", argv, Probe(f"http://127.0.0.1:{s.ports.kwok}/healthz"), env)


def all_components(settings: Settings) -> list[Component]:
    """Every component, in start order."""
    builders = (_etcd, _apiserver, _controller_manager, _scheduler, _kwok)
    return [build(settings) for build in builders]
