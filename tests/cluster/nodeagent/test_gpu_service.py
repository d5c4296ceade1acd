"""Support takes a GPU of the real node out for maintenance and puts it back in service from
the support console (issue #34), through the real queue, a real Celery worker, the served
portal the node's agent streams to, and the real scheduler:

- out for maintenance: the worker applies a DeviceTaintRule (`tranche.dev/gpu-maintenance:
  NoSchedule`) for that device; the pod running there keeps running, a new claim that can
  only use that GPU is not allocated;
- a fatal XID (48, double-bit ECC: the GPU keeps answering) then taints it NoExecute in the
  agent's ResourceSlice and Kubernetes evicts the pod;
- mark in service: the rule is deleted, the portal's answer tells the agent, the agent drops
  its taint, and the waiting claim lands on that GPU; each action is an AuditLog row.
"""

from __future__ import annotations

import json
import time

from django.db import connection
from django.test import Client
from django.urls import reverse
from kubernetes import client

from controller.apply import http
from controller.render.claim_template import render_claim_template
from controller.render.spec import ProjectSpec
from portal.agents import services
from portal.agents.models import NodeToken
from portal.audit.models import AuditLog
from tests.cluster.nodeagent.conftest import allocation_of, create_template, describe_pod
from tests.cluster.nodeagent.test_gpu_health import _devices, _fault, _gone_or_leaving, _taints
from tests.helpers.factories import make_staff
from tests.helpers.portal import serve_portal
from tests.helpers.realnode import run_pod
from tests.helpers.skips import needs_native_sim
from tests.helpers.wait import wait_for

pytestmark = [needs_native_sim]
RULES = "/apis/resource.k8s.io/v1/devicetaintrules"


def _rules(api, device: str, node: str) -> list[dict]:
    resp = http(api, "GET", RULES)
    items = json.loads(resp.read())["items"]
    return [r for r in items if r["spec"]["deviceSelector"] == {
        "driver": "gpu.tranche.dev", "pool": node, "device": device}]  # fmt: skip


def _pinned_template(api, ns: str, product, uuid: str) -> None:
    """The product's template, its request kept to one GPU (a CEL selector on its UUID)."""
    spec = ProjectSpec(project_id=0, namespace=ns, organization="test", project="test")
    body = render_claim_template(spec, product)
    body["metadata"]["name"] = "pinned"
    (request,) = body["spec"]["spec"]["devices"]["requests"]
    request["exactly"]["selectors"] = [
        {"cel": {"expression": f'device.attributes["gpu.tranche.dev"].uuid == "{uuid}"'}}
    ]
    client.ResourceV1Api(api).create_namespaced_resource_claim_template(ns, body)


def _unschedulable(api, ns: str, name: str) -> bool:
    pod = client.CoreV1Api(api).read_namespaced_pod(name, ns)
    return any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
               for c in pod.status.conditions or [])  # fmt: skip


def _mark(browser: Client, node: str, uuid: str, action: str) -> None:
    page = browser.post(reverse("support_gpu_service"),
                        {"node": node, "gpu": uuid, "action": action})  # fmt: skip
    assert page.status_code == 302, page.content[:500]


def test_maintenance_drains_gracefully_and_in_service_returns_the_gpu(
    transactional_db,
    kube_cluster,
    real_node,
    product,
    make_namespace,
    *,
    controller_settings,
    worker,
    tmp_path,
) -> None:
    api, node = kube_cluster.api_client, real_node.name
    ns = make_namespace()
    create_template(api, ns, product)
    token_file = tmp_path / "node-token"
    token_file.write_text(services.issue_node_token(node))
    core = client.CoreV1Api(api)
    with (
        serve_portal(connection.settings_dict["NAME"]) as portal,
        real_node.streaming_to(portal.url, token_file),
    ):
        run_pod(api, ns, "a", product.device_class, node, args=["check"],
                env={"SAMPLE_ALLOC_MIB": "256"})  # fmt: skip
        wait_for(lambda: core.read_namespaced_pod("a", ns).status.phase == "Running"
                 and allocation_of(api, ns, "a"), 120,
                 lambda: describe_pod(api, ns, "a") + real_node.log_tail())  # fmt: skip
        device = allocation_of(api, ns, "a")["device"]
        uuid = _devices(api, node)[device]["attributes"]["uuid"]["string"]
        wait_for(lambda: any(g["uuid"] == uuid for g in
                             NodeToken.objects.get(node_name=node).gpus or []), 30,
                 lambda: "the agent's GPUs in the portal\n" + portal.log_tail())  # fmt: skip
        browser = Client()
        browser.force_login(make_staff("sue", "Support"))
        try:
            t0 = time.monotonic()
            _mark(browser, node, uuid, "maintenance")
            wait_for(lambda: _rules(api, device, node), 30,
                     lambda: "the maintenance rule\n" + worker.read_text()[-3000:])  # fmt: skip
            ruled = time.monotonic() - t0
            (rule,) = _rules(api, device, node)
            assert rule["spec"]["taint"]["effect"] == "NoSchedule"
            _pinned_template(api, ns, product, uuid)
            run_pod(api, ns, "b", "pinned", node, args=["check"],
                    env={"SAMPLE_ALLOC_MIB": "256"})  # fmt: skip
            wait_for(lambda: _unschedulable(api, ns, "b"), 60,
                     lambda: describe_pod(api, ns, "b"))  # fmt: skip
            a = core.read_namespaced_pod("a", ns)  # NoSchedule: the running pod stays
            assert a.status.phase == "Running", describe_pod(api, ns, "a")
            assert not a.metadata.deletion_timestamp
            assert allocation_of(api, ns, "b") is None

            _fault(real_node, "xid", device.removeprefix("gpu-"), 48)
            wait_for(lambda: _taints(api, node, device), 10,
                     lambda: "the NoExecute taint\n" + real_node.log_tail())  # fmt: skip
            wait_for(lambda: _gone_or_leaving(api, ns, "a"), 30, lambda: describe_pod(api, ns, "a"))

            t1 = time.monotonic()
            _mark(browser, node, uuid, "in-service")
            wait_for(lambda: not _rules(api, device, node), 30,
                     lambda: "the rule to go\n" + worker.read_text()[-3000:])  # fmt: skip
            unruled = time.monotonic() - t1
            wait_for(lambda: not _taints(api, node, device), 30,
                     lambda: "the agent's taint to go\n" + real_node.log_tail())  # fmt: skip
            untainted = time.monotonic() - t1
            wait_for(lambda: allocation_of(api, ns, "b"), 120,
                     lambda: describe_pod(api, ns, "b"))  # fmt: skip
            allocated = time.monotonic() - t1
            wait_for(lambda: core.read_namespaced_pod("b", ns).status.phase == "Running", 120,
                     lambda: describe_pod(api, ns, "b") + real_node.log_tail())  # fmt: skip
            landed = time.monotonic() - t1
            assert allocation_of(api, ns, "b")["device"] == device
        finally:
            for r in _rules(api, device, node):
                http(api, "DELETE", f"{RULES}/{r['metadata']['name']}")
        print(  # noqa: T201
            f"\nmaintenance rule after {ruled:.2f} s; in service: rule gone after "
            f"{unruled:.2f} s, agent's XID 48 taint gone after {untainted:.2f} s, the waiting "
            f"claim allocated {device} after {allocated:.2f} s, its pod Running after "
            f"{landed:.2f} s"
        )
    actions = list(AuditLog.objects.filter(action__startswith="gpu.").order_by("at")
                   .values_list("action", "actor_label", "after"))  # fmt: skip
    assert actions == [
        ("gpu.maintenance", "sue", {"action": "maintenance", "node": node, "gpu": uuid}),
        ("gpu.in_service", "sue", {"action": "in-service", "node": node, "gpu": uuid}),
    ]
