"""A tenant cannot take the slice's interception away at admission (issue #13 items 10-12).

Checked on the real control plane, as the tenant (impersonated, in the project's tenant group),
with server-side dry runs: the API server runs the whole admission chain (RBAC, the policies,
Pod Security) and stores nothing. Kinds the tenant role may not create (DaemonSet,
ReplicationController) are sent by the admin: the policies judge whoever asks.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from controller.reconcile import reconcile_project
from nodeagent.cdi import ClaimFiles, render_cdi_spec
from tests.cluster.controller.conftest import impersonating, wait_refused
from tests.helpers.wait import wait_for

CLASS = "tranche-v100-8g"
GPU_REFUSAL = "does not offer: shared GPU slices are only available through resource claims"
MOUNT_REFUSAL = "A volume there would hide the slice's limits"
ENV_REFUSAL = "These decide which GPU, which driver features and which libraries"
ENV_FROM_REFUSAL = "load variables with envFrom without a prefix"


def _container(**fields: Any) -> dict[str, Any]:
    return {"name": "main", "image": "registry.invalid/tranche/workload:1", **fields}


def _pod_spec(container: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {"containers": [container or _container()], **spec}


class Fenced:
    """A provisioned tenant namespace and dry-run creators, as the tenant and as the admin."""

    def __init__(self, namespace: str, tenant_api: client.ApiClient, admin_api: client.ApiClient):
        self.namespace = namespace
        self.tenant_api = tenant_api
        self.admin_api = admin_api

    def create(self, kind: str, pod_spec: dict[str, Any], *, as_admin: bool = False) -> None:
        """Create (dry run) a `kind` carrying `pod_spec`; raises ApiException when refused."""
        api = self.admin_api if as_admin else self.tenant_api
        name = f"x{time.monotonic_ns() % 10**9}"
        labels = {"app": name}
        template = {"metadata": {"labels": labels}, "spec": pod_spec}
        ns, dry = self.namespace, "All"
        apps, batch, core = client.AppsV1Api(api), client.BatchV1Api(api), client.CoreV1Api(api)
        meta = {"name": name}
        selected = {"selector": {"matchLabels": labels}, "template": template}
        if kind == "Pod":
            core.create_namespaced_pod(ns, {"metadata": meta, "spec": pod_spec}, dry_run=dry)
        elif kind == "Deployment":
            apps.create_namespaced_deployment(ns, {"metadata": meta, "spec": selected}, dry_run=dry)
        elif kind == "ReplicaSet":
            apps.create_namespaced_replica_set(
                ns, {"metadata": meta, "spec": selected}, dry_run=dry
            )
        elif kind == "StatefulSet":
            body = {"metadata": meta, "spec": {**selected, "serviceName": name}}
            apps.create_namespaced_stateful_set(ns, body, dry_run=dry)
        elif kind == "DaemonSet":
            apps.create_namespaced_daemon_set(ns, {"metadata": meta, "spec": selected}, dry_run=dry)
        elif kind == "ReplicationController":
            body = {"metadata": meta, "spec": {"selector": labels, "template": template}}
            core.create_namespaced_replication_controller(ns, body, dry_run=dry)
        elif kind in ("Job", "CronJob"):
            job = {"template": {**template, "spec": {**pod_spec, "restartPolicy": "Never"}}}
            if kind == "Job":
                batch.create_namespaced_job(ns, {"metadata": meta, "spec": job}, dry_run=dry)
            else:
                body = {
                    "metadata": meta,
                    "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": job}},
                }
                batch.create_namespaced_cron_job(ns, body, dry_run=dry)
        else:
            raise ValueError(kind)

    def refused(self, kind: str, pod_spec: dict[str, Any], expect: str, **kw: Any) -> str:
        """The refusal's body; waits while the policies (re)load, fails if admitted."""
        return wait_refused(lambda: self.create(kind, pod_spec, **kw), f"{kind} {pod_spec}", expect)

    def admitted(self, kind: str, pod_spec: dict[str, Any], **kw: Any) -> None:
        self.create(kind, pod_spec, **kw)


@pytest.fixture
def fenced(tenant, kube_cluster) -> Iterator[Fenced]:
    """The tenant bought two 8g slices; its namespace carries the policies' tenant label."""
    tenant.order(CLASS, 2)
    reconcile_project(tenant.project.pk)
    ns = tenant.namespace
    tenant_api = impersonating(kube_cluster, "alice", [f"tranche.dev:tenant:{ns}"])
    yield Fenced(ns, tenant_api, kube_cluster.api_client)
    tenant_api.close()


def _slice_paths() -> list[str]:
    """Every in-container path the real CDI spec mounts, and the folder of each file."""
    files = ClaimFiles("/h/core.so", "/h/ld.so.preload", "/h/slice.conf", "/h/region")
    mounts = render_cdi_spec("uid", [], files)["containerEdits"]["mounts"]
    paths = [m["containerPath"] for m in mounts]
    folders = [posixpath.dirname(p) for p in paths if not p.endswith("/region")]
    return sorted(set(paths + folders))


def test_volumes_cannot_cover_the_core_its_preload_or_the_slice_files(fenced: Fenced) -> None:
    """Item 10: a volume at, inside or above where the CDI spec mounts the core is refused."""
    slice_paths = _slice_paths()
    assert {"/etc/ld.so.preload", "/etc", "/usr/lib/tranche", "/etc/tranche"} <= set(slice_paths)
    over = [
        *slice_paths,
        "/",
        "/usr",
        "/var/run",
        "/run/tranche/region",  # /var/run is /run in most images
        "/usr/lib/tranche/libtranche.so",
        "/etc/tranche/slice.conf",
        "/etc//ld.so.preload",  # not in plain form: a prefix comparison could not judge it
        "/usr/lib/./tranche",
        "/etc/myapp/../ld.so.preload",
        "/etc/",
    ]
    for path in over:
        body = fenced.refused(
            "Pod",
            _pod_spec(
                _container(volumeMounts=[{"name": "v", "mountPath": path}]),
                volumes=[{"name": "v", "emptyDir": {}}],
            ),
            MOUNT_REFUSAL,
        )
        assert "ValidatingAdmissionPolicy 'tranche-pod-hardening'" in body
        assert "Container(s) main mount a volume" in body
    # a ConfigMap's key over the preload file, and a raw block device there
    fenced.refused(
        "Pod",
        _pod_spec(
            _container(
                volumeMounts=[
                    {"name": "cm", "mountPath": "/etc/ld.so.preload", "subPath": "preload"}
                ]
            ),
            volumes=[{"name": "cm", "configMap": {"name": "mine"}}],
        ),
        MOUNT_REFUSAL,
    )
    fenced.refused(
        "Pod",
        _pod_spec(
            _container(volumeDevices=[{"name": "b", "devicePath": "/etc/ld.so.preload"}]),
            volumes=[{"name": "b", "persistentVolumeClaim": {"claimName": "block"}}],
        ),
        MOUNT_REFUSAL,
    )
    # in an init container and in a Deployment's template as well
    init = _pod_spec(
        initContainers=[
            {**_container(volumeMounts=[{"name": "v", "mountPath": "/etc"}]), "name": "setup"}
        ],
        volumes=[{"name": "v", "emptyDir": {}}],
    )
    assert "Container(s) setup mount" in fenced.refused("Pod", init, MOUNT_REFUSAL)
    fenced.refused("Deployment", init, MOUNT_REFUSAL)
    # ordinary places stay open
    for path in ("/data", "/etc/myapp", "/var/run/app", "/usr/lib/tranchefoo", "/tmp/.cache"):
        fenced.admitted(
            "Pod",
            _pod_spec(
                _container(volumeMounts=[{"name": "v", "mountPath": path}]),
                volumes=[{"name": "v", "emptyDir": {}}],
            ),
        )


def test_environment_that_steers_gpu_or_loader_is_refused_in_every_form(fenced: Fenced) -> None:
    """Item 11: env, env from a ConfigMap key, and envFrom without a safe prefix are refused."""
    core = client.CoreV1Api(fenced.tenant_api)
    core.create_namespaced_config_map(
        fenced.namespace,
        {"metadata": {"name": "gpu-env"}, "data": {"NVIDIA_VISIBLE_DEVICES": "all"}},
    )
    core.create_namespaced_secret(
        fenced.namespace,
        {"metadata": {"name": "loader-env"}, "stringData": {"LD_PRELOAD": "/tmp/x.so"}},
    )
    names = (
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "NVIDIA_IMEX_CHANNELS",
        "CUDA_VISIBLE_DEVICES",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "TRANCHE_MEMORY_LIMIT",
    )
    for name in names:
        body = fenced.refused(
            "Pod", _pod_spec(_container(env=[{"name": name, "value": "x"}])), ENV_REFUSAL
        )
        assert "Container(s) main set LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH" in body
    from_key = {"configMapKeyRef": {"name": "gpu-env", "key": "NVIDIA_VISIBLE_DEVICES"}}
    fenced.refused(
        "Pod",
        _pod_spec(_container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": from_key}])),
        ENV_REFUSAL,
    )
    unsafe_sources = [
        {"configMapRef": {"name": "gpu-env"}},
        {"secretRef": {"name": "loader-env"}},
        {"configMapRef": {"name": "gpu-env"}, "prefix": "NV"},  # NV + IDIA_VISIBLE_DEVICES
        {"secretRef": {"name": "loader-env"}, "prefix": "LD_"},
        {"configMapRef": {"name": "gpu-env"}, "prefix": "CUDA_X"},
    ]
    for source in unsafe_sources:
        body = fenced.refused("Pod", _pod_spec(_container(envFrom=[source])), ENV_FROM_REFUSAL)
        assert "Give each envFrom a prefix such as APP_" in body
    for kind in ("Deployment", "CronJob"):
        fenced.refused(kind, _pod_spec(_container(envFrom=unsafe_sources[:1])), ENV_FROM_REFUSAL)
        fenced.refused(
            kind, _pod_spec(_container(env=[{"name": "LD_PRELOAD", "value": "x"}])), ENV_REFUSAL
        )
    # a prefix that cannot spell a steering name, and ordinary variables, are admitted
    safe = [{"configMapRef": {"name": "gpu-env"}, "prefix": "APP_"}]
    fenced.admitted(
        "Pod", _pod_spec(_container(envFrom=safe, env=[{"name": "HF_HOME", "value": "/data"}]))
    )


@pytest.mark.parametrize(
    ("kind", "as_admin"),
    [
        ("Deployment", False),
        ("StatefulSet", False),
        ("ReplicaSet", False),
        ("Job", False),
        ("CronJob", False),
        ("DaemonSet", True),  # outside the tenant role: the policy still judges it
        ("ReplicationController", True),
    ],
)
def test_workload_asking_for_a_device_plugin_gpu_is_refused_like_the_pod(
    fenced: Fenced, kind: str, as_admin: bool
) -> None:
    """Item 12: the pod template's nvidia.com/gpu is refused at the workload, same message."""
    limits = _pod_spec(_container(resources={"limits": {"nvidia.com/gpu": "1"}}))
    pod_body = fenced.refused("Pod", limits, GPU_REFUSAL)
    body = fenced.refused(kind, limits, GPU_REFUSAL, as_admin=as_admin)
    assert "ValidatingAdmissionPolicy 'tranche-no-device-plugin-gpus'" in body
    message = _message(pod_body)
    assert message in body, (message, body)
    # requests alone are invalid for extended resources (the API server wants a limit too)
    both = {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}
    requests = _pod_spec(
        _container(), initContainers=[{**_container(resources=both), "name": "warmup"}]
    )
    assert "Container(s) warmup request a whole GPU" in fenced.refused(
        kind, requests, GPU_REFUSAL, as_admin=as_admin
    )
    fenced.admitted(kind, _pod_spec(), as_admin=as_admin)


def _message(body: str) -> str:
    """The policy's own message inside the API server's refusal text."""
    start = body.index("Container(s) main request a whole GPU")
    return body[start : body.index('","reason"', start)]


def test_workload_made_before_a_rule_can_still_be_scaled_and_labelled(
    fenced: Fenced, make_namespace: Callable[..., str], kube_cluster
) -> None:
    """Only a new pod template is judged: a workload that predates a rule (here: made before its
    namespace became a tenant's) can still be scaled and relabelled, so the platform's own updates
    (scale, finalizers) never get stuck; changing its template is judged."""
    ns = make_namespace()
    apps = client.AppsV1Api(kube_cluster.api_client)
    name = "old"
    preload = _pod_spec(_container(env=[{"name": "LD_PRELOAD", "value": "/x.so"}]))
    body = {
        "metadata": {"name": name},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": preload},
        },
    }
    apps.create_namespaced_deployment(ns, body)
    client.CoreV1Api(kube_cluster.api_client).patch_namespace(
        ns, {"metadata": {"labels": {"tranche.dev/tenant": "true"}}}
    )
    in_tenant_ns = Fenced(ns, kube_cluster.api_client, kube_cluster.api_client)
    in_tenant_ns.refused("Pod", preload, ENV_REFUSAL)  # the rules now apply in this namespace
    apps.patch_namespaced_deployment(
        name, ns, {"metadata": {"labels": {"team": "a"}}, "spec": {"replicas": 2}}
    )
    # the deployment controller's own update of the existing ReplicaSet passes too
    wait_for(
        lambda: [rs for rs in apps.list_namespaced_replica_set(ns).items if rs.spec.replicas == 2],
        30,
        "the deployment controller to scale its ReplicaSet to 2",
    )
    changed = {"spec": {"template": {"metadata": {"labels": {"app": name, "v": "2"}}}}}
    with pytest.raises(ApiException) as refused:
        apps.patch_namespaced_deployment(name, ns, changed, dry_run="All")
    assert ENV_REFUSAL in refused.value.body
