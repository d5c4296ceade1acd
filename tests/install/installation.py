"""The chart installed as an operator would, on the dev cluster's real node, for the install tier.

`Installation.install()` does docs/install.md's steps with what this machine has in place of an
operator's cluster: the images `make images` built are imported into the real nodes' containerd
under `registry.tranche.dev/tranche` (deploy/images/node.py); the project-owned PostgreSQL and
Redis are the "external services" (a database and a Redis index of their own, so the installed
copy shares nothing with other tiers); then `helm install`, the node token through the
installed portal (`kubectl exec ... create_node_token`), and the agents' Secret.

Network: the real node's pods sit on a bridge with no gateway (docs/devcluster.md), so nothing on
it reaches the API server or the databases on loopback. The platform's pods therefore run on the
host network (`platform.hostNetwork`), reach the API server at 127.0.0.1 (`platform.apiServer`:
there is no kube-proxy for the `kubernetes` Service) and PostgreSQL/Redis at 127.0.0.1 too;
the portal listens on the node's TRANCHE_PORT. Tenants' pods keep the bridge.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import redis
import yaml
from kubernetes import client, watch

from deploy.devcluster.config import load_node_settings, load_settings
from deploy.devcluster.node.render import NodePaths, node_paths
from deploy.images import node as node_images
from deploy.local import services
from deploy.tools.build import ensure_helm
from tests.helpers.realnode import TOLERATION
from tests.helpers.wait import wait_for

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "chart" / "tranche"
RBAC = CHART / "rbac" / "rbac.yaml"
LAYOUT = REPO / ".state" / "images" / "oci"
NAMESPACE = "tranche-system"
RELEASE = "tranche"
DATABASE = "tranche_install"
REDIS_DB = 7  # other tiers use 0 and their own test indexes
REAL_NODE = {"tranche.dev/real-node": "true"}


def version() -> str:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


@dataclass
class Installation:
    kube: object  # tests.helpers.cluster.KubeCluster
    node: NodePaths
    port: int
    timings: dict[str, float] = field(default_factory=dict)
    job_states: list[str] = field(default_factory=list)

    @property
    def api(self) -> client.ApiClient:
        return self.kube.api_client

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kubectl(self, *args: str, check: bool = True, timeout: float = 120) -> str:
        done = subprocess.run([*self.kube.kubectl, *args], capture_output=True, text=True,
                              check=False, timeout=timeout)  # fmt: skip
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    @property
    def chart(self) -> Path:
        return CHART

    def helm_async(self, *args: str) -> subprocess.Popen:
        argv = [str(ensure_helm()), f"--kubeconfig={self.kube.kubeconfig}", *args]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def helm(self, *args: str, check: bool = True, timeout: float = 600) -> str:
        argv = [str(ensure_helm()), f"--kubeconfig={self.kube.kubeconfig}", *args]
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    # --- what an operator provides -------------------------------------------------------
    def fresh_database(self) -> str:
        """An empty database of its own in the project-owned PostgreSQL; its password."""
        lay = services.layout()
        password = services.secret(lay, "db-password")
        dsn = {"host": "127.0.0.1", "port": lay.pg_port, "dbname": "postgres", "user": "tranche"}
        with psycopg.connect(**dsn, password=password, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {DATABASE} OWNER tranche")
        return password

    def fresh_redis(self) -> None:
        """Empty the installed copy's Redis index: sign-up throttles and caches of an earlier
        session would otherwise carry over (5 sign-ups an hour from one address)."""
        lay = services.layout()
        password = services.secret(lay, "redis-password")
        conn = redis.Redis(host="127.0.0.1", port=lay.redis_port, db=REDIS_DB, password=password)
        try:
            conn.flushdb()
        finally:
            conn.close()

    def values(self, tag: str) -> dict:
        lay = services.layout()
        redis_password = services.secret(lay, "redis-password")
        api_port = load_settings().ports.apiserver
        placement = {"nodeSelector": REAL_NODE, "tolerations": [TOLERATION]}
        return {
            "image": {"registry": node_images.REGISTRY, "tag": tag},
            "platform": {
                **placement,
                "hostNetwork": True,
                "apiServer": {"host": "127.0.0.1", "port": api_port},
            },
            "database": {"host": "127.0.0.1", "port": lay.pg_port, "name": DATABASE},
            "secrets": {
                "dbPassword": services.secret(lay, "db-password"),
                "redisUrl": f"redis://:{redis_password}@127.0.0.1:{lay.redis_port}/{REDIS_DB}",
            },
            # One node: a second portal would want the same host port, a second worker the same
            # Celery node name (worker@<host>).
            "portal": {
                "replicas": 1,
                "port": self.port,
                "allowedHosts": ["127.0.0.1"],
                # first start unpacks the image: minutes here when 8 sessions build
                "startupSeconds": 600,
                # the tests play the one proxy (an ingress controller) that appends the client's
                # address to X-Forwarded-For (tests/install/test_proxy.py)
                "proxy": {"trustedHops": 1},
            },
            "worker": {"replicas": 1},
            # leader-elected: one runs, one stands by (tests/install/test_leader.py)
            "beat": {"replicas": 2},
            "watcher": {"replicas": 2},
            "nodeAgent": {
                # null drops the chart's default GPU-feature-discovery label (kwok nodes have it)
                "nodeSelector": {"nvidia.com/gpu.present": None, **REAL_NODE},
                "tolerations": [TOLERATION],
                "simulate": True,
                "kubeletDir": str(self.node.kubelet_dir.resolve()),
                "cdiDir": str(self.node.cdi_dir.resolve()),
                "stateDir": str((self.node.root / "tranche").resolve()),
                "portalUrl": f"ws://127.0.0.1:{self.port}/ws/agent/",
            },
        }

    def _values_file(self, tag: str) -> Path:
        path = self.node.root.parent / "install-values.yaml"
        path.write_text(yaml.safe_dump(self.values(tag)))
        return path

    # --- the install ---------------------------------------------------------------------
    def _watch_job(self, stop: threading.Event) -> None:
        """Record the migrations Job's states while helm runs it: a watch, since helm deletes
        the Job the moment it succeeded (a poll would miss the Complete state)."""
        batch = client.BatchV1Api(self.api)
        selector = f"metadata.name={RELEASE}-migrate"
        while not stop.is_set():
            stream = watch.Watch()
            for event in stream.stream(batch.list_namespaced_job, NAMESPACE,
                                       field_selector=selector, timeout_seconds=2):  # fmt: skip
                job = event["object"]
                conds = [c.type for c in (job.status.conditions or []) if c.status == "True"]
                state = ",".join(conds) or "running"
                if not self.job_states or self.job_states[-1] != state:
                    self.job_states.append(state)
                if stop.is_set():
                    stream.stop()

    def install(self, tag: str) -> None:
        started = time.monotonic()
        loaded = node_images.load(LAYOUT)
        self.timings["images imported"] = time.monotonic() - started
        assert any(f"{node_images.REGISTRY}/tranche:{tag}" in v for v in loaded.values()), loaded
        self.remove()
        password = self.fresh_database()
        assert password
        self.fresh_redis()
        values = self._values_file(tag)
        started = time.monotonic()
        stop = threading.Event()
        watcher = threading.Thread(target=self._watch_job, args=(stop,), daemon=True)
        watcher.start()
        try:
            self.helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace",
                      "-f", str(values), "--timeout", "600s")  # fmt: skip
        finally:
            stop.set()
            watcher.join()
        self.timings["helm install (migrations Job)"] = time.monotonic() - started
        wait_for(lambda: self.deployment_ready("portal"), 600,
                 lambda: "the portal Ready\n" + self.describe("portal"))  # fmt: skip
        self.timings["portal Ready"] = time.monotonic() - started
        self.node_token()
        wait_for(self.all_ready, 300, lambda: "every platform pod Ready\n" + self.describe())
        self.timings["every platform pod Ready"] = time.monotonic() - started

    def node_token(self) -> None:
        """docs/install.md step 5: the node's token from the installed portal, into the Secret."""
        token = self.kubectl("-n", NAMESPACE, "exec", f"deploy/{RELEASE}-portal", "--",
                             "python3", "manage.py", "create_node_token", self.node.name,
                             "--rotate").strip().splitlines()[-1]  # fmt: skip
        assert len(token) >= 32, token
        core = client.CoreV1Api(self.api)
        body = {"metadata": {"name": "tranche-node-tokens"}, "stringData": {self.node.name: token}}
        try:
            core.create_namespaced_secret(NAMESPACE, body)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
            core.replace_namespaced_secret("tranche-node-tokens", NAMESPACE, body)
        # The agent found no token and is in its crash back-off: start it again now.
        core.delete_collection_namespaced_pod(
            NAMESPACE, label_selector="app.kubernetes.io/component=node-agent"
        )

    def remove(self) -> None:
        """Uninstall an earlier release and the chart-kept leftovers (Secret, node-token Secret)."""
        if self.helm("status", RELEASE, "-n", NAMESPACE, check=False).strip():
            self.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", check=False)
        self.kubectl("delete", "--ignore-not-found", "--wait", "-f", str(RBAC), check=False)
        self.kubectl("-n", NAMESPACE, "delete", "secret", "--ignore-not-found",
                     f"{RELEASE}-secrets", "tranche-node-tokens", check=False)  # fmt: skip

    # --- what the tests look at ----------------------------------------------------------
    def up(self) -> bool:
        """A release is installed and every platform pod is Ready."""
        if "STATUS: deployed" not in self.helm("status", RELEASE, "-n", NAMESPACE, check=False):
            return False
        try:
            return self.all_ready()
        except client.ApiException:
            return False

    def pods(self) -> list[client.V1Pod]:
        return client.CoreV1Api(self.api).list_namespaced_pod(NAMESPACE).items

    def deployment_ready(self, component: str) -> bool:
        dep = client.AppsV1Api(self.api).read_namespaced_deployment(
            f"{RELEASE}-{component}", NAMESPACE
        )
        want = dep.spec.replicas
        st = dep.status
        return (
            (st.ready_replicas or 0) == want
            and (st.updated_replicas or 0) == want
            and (st.replicas or 0) == want
        )

    def all_ready(self) -> bool:
        apps = client.AppsV1Api(self.api)
        deps = apps.list_namespaced_deployment(NAMESPACE).items
        ds = apps.read_namespaced_daemon_set(f"{RELEASE}-node-agent", NAMESPACE).status
        return (
            bool(deps)
            and all(
                self.deployment_ready(d.metadata.name.removeprefix(f"{RELEASE}-")) for d in deps
            )
            and ds.desired_number_scheduled >= 1
            and ds.number_ready == ds.desired_number_scheduled
            and ds.updated_number_scheduled == ds.desired_number_scheduled
        )

    def describe(self, component: str = "") -> str:
        selector = f"app.kubernetes.io/component={component}" if component else ""
        args = ["-n", NAMESPACE, "get", "pods", "-o", "wide"]
        text = self.kubectl(*args, *(["-l", selector] if selector else []), check=False)
        for pod in self.pods():
            if component and pod.metadata.labels.get("app.kubernetes.io/component") != component:
                continue
            for st in (pod.status.container_statuses or []) + (
                pod.status.init_container_statuses or []
            ):
                if not st.ready:
                    state = json.dumps(self.api.sanitize_for_serialization(st.state))
                    text += f"\n{pod.metadata.name}/{st.name}: {state}"
                    text += "\n" + self.kubectl("-n", NAMESPACE, "logs", pod.metadata.name, "-c",
                                                st.name, "--tail=20", check=False)  # fmt: skip
        return text

    def agent_log(self) -> str:
        return self.kubectl("-n", NAMESPACE, "logs", "-l", "app.kubernetes.io/component=node-agent",
                            "-c", "agent", "--tail=-1", check=False)  # fmt: skip


def real_node_paths() -> NodePaths:
    return node_paths(load_settings(), load_node_settings(), 0)


def portal_port() -> int:
    return int(os.environ.get("TRANCHE_PORT", "8000"))
