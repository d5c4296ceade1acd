"""The agent's findings reach the support console through the real agent ingest: the NVML
backstop (real `Collector`, real pynvml on simgpu with driver overhead injected) stops a workload
over its cap, and the NVML-vs-core disagreement behind it is found too; the agent's status
stream sends both in its next message to a real daphne, and /support/ lists both alerts with a
link to the project's live page. A claim the DRA plugin fails to prepare (called over real
unix-socket gRPC as the kubelet does) reaches it the same way."""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import tempfile
from pathlib import Path

import grpc
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection, connections
from django.test import Client
from django.urls import reverse

from nodeagent.draplugin.gen.dra.v1 import api_pb2 as v1
from nodeagent.draplugin.gen.dra.v1 import api_pb2_grpc as v1_grpc
from nodeagent.draplugin.prepare import Layout, Preparer
from nodeagent.draplugin.server import PluginServer, Sockets
from nodeagent.status import Collector
from nodeagent.stream import StatusStream
from portal.agents import services
from portal.agents.models import NodeToken
from portal.tenants.models import Organization, Project
from tests.helpers.gpus import NODE, allocated_claim, v100
from tests.helpers.observed import bind_pods
from tests.helpers.portal import serve_portal
from tests.helpers.skips import needs_native_sim
from tests.helpers.wait import wait_for
from tests.integration.agents.test_backstop import Workload

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def sim(sim_nvml):
    return sim_nvml


def _findings() -> list[dict]:
    try:
        return NodeToken.objects.get(node_name=NODE).findings
    finally:
        connections.close_all()  # a worker thread's connection must not outlive the test


def _ship(portal_url: str, token: str, collector: Collector, count: int) -> StatusStream:
    """Run the agent's status stream until the portal stored `count` findings of this node."""
    stream = StatusStream(portal_url, NODE, token)

    async def agent() -> None:
        stop = asyncio.Event()
        runner = asyncio.create_task(stream.run(stop))
        try:
            gpus, pods = collector.collect()  # the backstop (if any) runs here
            stream.offer(gpus, pods, collector.take_findings())
            await asyncio.to_thread(
                wait_for, lambda: len(_findings()) >= count, 10, f"{count} findings stored"
            )
        finally:
            stop.set()
            await runner

    asyncio.run(agent())
    return stream


def _support_page() -> str:
    support = get_user_model().objects.create_user(username="sup", password="x", is_staff=True)
    support.groups.add(Group.objects.get_or_create(name="Support")[0])
    client = Client()
    client.force_login(support)
    return client.get(reverse("support_console")).content.decode()


def _alert(page: str, kind: str) -> str:
    assert f'<li data-kind="{kind}">' in page, page
    return page.split(f'<li data-kind="{kind}">', 1)[1].split("</li>", 1)[0]


@needs_native_sim
def test_backstop_and_disagreement_reach_the_support_console(sim):
    org = Organization.objects.create(name="Acme", slug="acme")
    project = Project.objects.create(organization=org, name="ML", slug="ml", namespace="acme-ml")
    bind_pods(project.id, {"pod-a": {"phase": "Running", "reason": "", "node": NODE}})
    token = services.issue_node_token(NODE)
    w = Workload(sim, "f1d0c1a1-0000-4000-8000-000000000001", permille=500)
    try:
        collector = w.collector(kill=True)
        with serve_portal(connection.settings_dict["NAME"]) as portal:
            stream = _ship(portal.url, token, collector, 2)
            assert not stream.rejected, (stream.rejected, portal.log_tail())
        assert wait_for(w.proc.poll, 5, "the offending process to stop") == -signal.SIGKILL
        assert collector.take_findings() == []  # taken once: sent once
    finally:
        w.close()
    kinds = {f["kind"]: f for f in NodeToken.objects.get(node_name=NODE).findings}
    detail = kinds["nvml-disagrees"]["detail"]
    assert set(kinds) == {"backstop-stopped", "nvml-disagrees"}
    assert kinds["backstop-stopped"]["namespace"] == "acme-ml"
    assert kinds["backstop-stopped"]["subject"] == "pod-a"
    assert f"stopped pid {w.proc.pid}" in kinds["backstop-stopped"]["detail"]
    # NVML sees the driver overhead the core cannot: ~1.35 GiB against the ~0.9 GiB charged
    seen = re.search(r"NVML sees (\d+) MiB .* core charged (\d+) MiB \(cap 1024 MiB", detail)
    assert seen, detail
    nvml_mib, core_mib = map(int, seen.groups())
    assert nvml_mib > 1024 + 64 > core_mib >= 900, detail
    page = _support_page()
    live = reverse("project_status", args=[project.pk])
    for kind, words in (
        ("backstop-stopped", f"Backstop on {NODE} stopped processes of acme-ml/pod-a"),
        ("nvml-disagrees", f"NVML and the core disagree on {NODE} for acme-ml/pod-a"),
    ):
        item = _alert(page, kind)
        assert words in item, item
        assert f'<a href="{live}">live page</a>' in item, item


def test_a_claim_that_fails_to_prepare_reaches_the_support_console(tmp_path):
    org = Organization.objects.create(name="Acme", slug="acme")
    project = Project.objects.create(organization=org, name="ML", slug="ml", namespace="acme-ml")
    token = services.issue_node_token(NODE)
    pending = allocated_claim("u-2")
    del pending["status"]["allocation"]  # the scheduler has not allocated it: prepare refuses
    layout = Layout(tmp_path / "state", tmp_path / "cdi", tmp_path / "libtranche.so", True)
    preparer = Preparer(NODE, [v100(0)], layout, lambda ns, name: pending)
    collector = Collector(NODE, preparer.checkpoint, [v100(0)])
    sockets = Path(tempfile.mkdtemp(prefix="tr-", dir="/tmp"))  # unix paths: 107 bytes at most
    server = PluginServer(
        preparer, Sockets.under(sockets), on_prepare_failed=collector.prepare_failed
    )
    server.start()
    try:
        with grpc.insecure_channel(f"unix://{server.sockets.plugin}") as ch:
            resp = v1_grpc.DRAPluginStub(ch).NodePrepareResources(
                v1.NodePrepareResourcesRequest(
                    claims=[v1.Claim(namespace="acme-ml", uid="u-2", name="train-gpu")]
                ),
                timeout=5,
            )
        error = resp.claims["u-2"].error
        assert "is not allocated yet" in error
        with serve_portal(connection.settings_dict["NAME"]) as portal:
            stream = _ship(portal.url, token, collector, 1)
            assert not stream.rejected, (stream.rejected, portal.log_tail())
    finally:
        server.stop()
        shutil.rmtree(sockets, ignore_errors=True)
    item = _alert(_support_page(), "prepare-failed")
    assert f"Claim acme-ml/train-gpu failed to prepare on {NODE}: {error}" in item, item
    assert f'<a href="{reverse("project_status", args=[project.pk])}">live page</a>' in item
