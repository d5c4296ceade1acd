"""The simulated fleet on the bench's control plane: kwok GPU nodes, tenants who bought slices,
and their workloads (one Deployment per project, one slice per pod), plus the waits and counts
the figures are made of.

Fleet shape: nodes alternate V100 (even index) and A100 (odd) with 8 GPUs each; every GPU holds
four quarter slices (the smallest sellable share), so a node holds 32 slices and four tenants of
8 slices each. A step of N nodes therefore has 4N tenants and 32N slices, and the fleet is full:
a lost node's pods can only go Pending.
"""

from __future__ import annotations

import json
import secrets
from collections import Counter
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.rest import ApiException

from deploy.supervisor import wait_for
from tranche.names import LABEL_FLEET

GPUS_PER_NODE = 8
SLICES_PER_GPU = 4
TENANTS_PER_NODE = 4
SLICES_PER_TENANT = GPUS_PER_NODE * SLICES_PER_GPU // TENANTS_PER_NODE  # 8
MODELS = (
    ("Tesla V100-PCIE-32GB", "tranche-v100-8g"),
    ("NVIDIA A100-SXM4-40GB", "tranche-a100-10g"),
)
PREFIX = "kwok-scale"
FLEET_LABEL = LABEL_FLEET
FLEET = "scale"
AGENT_FLEET = "scale-agent"
AGENT_NODE_INDEX = 0
APP_LABEL = "tranche.dev/bench-app"
WORKLOAD = "infer"


def node_name(index: int) -> str:
    return f"{PREFIX}-{index}"


def model_of(index: int) -> tuple[str, str]:
    """(GPU model, quarter product's DeviceClass) of node `index`."""
    return MODELS[index % len(MODELS)]


@dataclass
class Tenant:
    """One organization with one project that bought `SLICES_PER_TENANT` slices."""

    index: int
    user_id: int
    membership_id: int
    project_id: int
    namespace: str
    device_class: str


def wait(predicate, timeout: float, what: str, interval: float = 0.5):
    """Poll `predicate` until it returns a true value (returned), or fail naming `what`."""
    return wait_for(predicate, timeout, what, interval)


# -- nodes ----------------------------------------------------------------------------------------
def fleet_of(index: int) -> str:
    """Node 0 is run by one node agent process (publishing, streaming); every
    other node by the fleet publisher, which selects `tranche.dev/fleet=scale` only."""
    return AGENT_FLEET if index == AGENT_NODE_INDEX else FLEET


def create_nodes(api: client.ApiClient, indexes: range) -> list[str]:
    """kwok GPU nodes for `indexes` (existing ones kept), labelled with their fleet."""
    from deploy.devcluster.nodes import fake_node_manifest

    core = client.CoreV1Api(api)
    names = []
    for i in indexes:
        model, _cls = model_of(i)
        body = fake_node_manifest(node_name(i), model, GPUS_PER_NODE, fleet=fleet_of(i))
        try:
            core.create_node(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
        names.append(node_name(i))
    wait(lambda: _ready_count(core, names) == len(names), 120, f"{len(names)} nodes Ready", 1)
    return names


def _ready_count(core: client.CoreV1Api, names: list[str]) -> int:
    wanted = set(names)
    ready = 0
    for node in core.list_node(label_selector=FLEET_LABEL).items:
        conds = node.status.conditions or []
        if node.metadata.name in wanted and any(
            c.type == "Ready" and c.status == "True" for c in conds
        ):
            ready += 1
    return ready


def published_devices(api: client.ApiClient) -> Counter[str]:
    """GPUs published by our driver, per node."""
    from tranche.names import DRIVER

    custom = client.CustomObjectsApi(api)
    items = custom.list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices")["items"]
    return Counter(
        {
            s["spec"]["nodeName"]: len(s["spec"].get("devices", []))
            for s in items
            if s["spec"].get("driver") == DRIVER
        }
    )


# -- tenants --------------------------------------------------------------------------------------
def create_tenants(indexes: range, password: str | None = None) -> list[Tenant]:
    """Organizations with one project each (no password hashing: sessions are made directly)."""
    from django.contrib.auth import get_user_model

    from portal.tenants.models import Membership
    from portal.tenants.services import sign_up

    user_model = get_user_model()
    made = []
    for i in indexes:
        username = f"scale-{i}"
        existing = user_model.objects.filter(username=username).first()
        if existing is None:
            user, org, project = sign_up(
                username=username, email=f"{username}@example.test", password=password,
                organization_name=f"Scale tenant {i}", project_name="inference",
            )  # fmt: skip
        else:
            user = existing
            org = Membership.objects.get(user=user).organization
            project = org.project_set.order_by("pk").first()
        membership = Membership.objects.get(user=user, organization=org)
        _model, cls = model_of(i // TENANTS_PER_NODE)
        made.append(Tenant(i, user.pk, membership.pk, project.pk, project.namespace, cls))
    return made


def order(tenant: Tenant, quantity: int) -> int:
    """Place a buy/resize to `quantity` slices; returns the order id (reconciled on commit)."""
    from portal.catalog.models import Product
    from portal.orders.services import place_order
    from portal.tenants.models import Membership, Project

    o, _ = place_order(
        membership=Membership.objects.get(pk=tenant.membership_id),
        project=Project.objects.get(pk=tenant.project_id),
        product=Product.objects.get(device_class=tenant.device_class),
        quantity=quantity,
        idempotency_key=secrets.token_hex(8),
    )
    return o.pk


def active_count(order_ids: list[int]) -> int:
    from portal.orders.models import Order

    return Order.objects.filter(pk__in=order_ids, state=Order.State.ACTIVE).count()


def order_latencies(order_ids: list[int]) -> dict[int, float]:
    """Seconds from each order's creation to its `active` history entry."""
    from portal.orders.models import Order, OrderEvent

    created = dict(Order.objects.filter(pk__in=order_ids).values_list("pk", "created_at"))
    events = OrderEvent.objects.filter(order_id__in=order_ids, to_state="active")
    return {e.order_id: (e.at - created[e.order_id]).total_seconds() for e in events}


# -- workloads ------------------------------------------------------------------------------------
def deployment(tenant: Tenant, replicas: int = SLICES_PER_TENANT) -> dict:
    """The tenant's inference Deployment: one slice per pod, from the project's template."""
    labels = {APP_LABEL: WORKLOAD}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": WORKLOAD, "namespace": tenant.namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {
                    "labels": labels,
                },
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "resourceClaims": [
                        {"name": "gpu", "resourceClaimTemplateName": tenant.device_class}
                    ],
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.invalid/infer:1",
                            "resources": {"claims": [{"name": "gpu"}]},
                        }
                    ],
                },
            },
        },
    }


def create_workloads(api: client.ApiClient, tenants: list[Tenant]) -> None:
    apps = client.AppsV1Api(api)
    for t in tenants:
        try:
            apps.create_namespaced_deployment(t.namespace, deployment(t))
        except ApiException as exc:
            if exc.status != 409:
                raise


def _list(api: client.ApiClient, path: str, query: list | None = None) -> list[dict]:
    from controller.apply import http

    resp = http(api, "GET", path, query or [], headers={"Accept": "application/json"})
    return json.loads(resp.read())["items"]


def claim_counts(api: client.ApiClient) -> tuple[int, int]:
    """(ResourceClaims, of which allocated), cluster-wide, in one LIST."""
    items = _list(api, "/apis/resource.k8s.io/v1/resourceclaims")
    return len(items), sum(1 for c in items if c.get("status", {}).get("allocation"))


def bench_pods(api: client.ApiClient) -> list[dict]:
    return _list(api, "/api/v1/pods", [("labelSelector", f"{APP_LABEL}={WORKLOAD}")])


def running_on(pods: list[dict]) -> Counter[str]:
    """Running bench pods per node."""
    return Counter(
        p["spec"].get("nodeName", "") for p in pods if p.get("status", {}).get("phase") == "Running"
    )


def unschedulable(pod: dict) -> bool:
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False"
        and c.get("reason") == "Unschedulable"
        for c in pod.get("status", {}).get("conditions", [])
    )  # fmt: skip
