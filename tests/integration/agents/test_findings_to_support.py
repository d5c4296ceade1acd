"""The agent's findings reach the support console through the real agent ingest: the NVML
backstop (real `Collector`, real pynvml on simgpu with driver overhead injected) stops a workload
over its cap, and the NVML-vs-core disagreement behind it is found too; the agent's status
stream sends both in its next message to a real daphne, and /support/ lists both alerts with a
link to the project's live page. An agent whose frame carries no findings stays valid."""

from __future__ import annotations

import asyncio
import re
import signal
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection, connections
from django.test import Client
from django.urls import reverse

from nodeagent.stream import StatusStream
from portal.agents import services
from portal.agents.bindings import write_pod_states
from portal.agents.models import NodeToken
from portal.tenants.models import Organization, Project
from tests.helpers.gpus import NODE
from tests.helpers.portal import serve_portal
from tests.helpers.skips import needs_native_sim
from tests.helpers.wait import wait_for
from tests.integration.agents.test_backstop import Workload

pytestmark = [pytest.mark.django_db(transaction=True), needs_native_sim]
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def sim(sim_nvml):
    return sim_nvml


def _findings() -> list[dict]:
    try:
        return NodeToken.objects.get(node_name=NODE).findings
    finally:
        connections.close_all()  # a worker thread's connection must not outlive the test


def test_backstop_and_disagreement_reach_the_support_console(sim):
    org = Organization.objects.create(name="Acme", slug="acme")
    project = Project.objects.create(organization=org, name="ML", slug="ml", namespace="acme-ml")
    write_pod_states(project.id, {"pod-a": {"phase": "Running", "reason": "", "node": NODE}})
    token = services.issue_node_token(NODE)
    w = Workload(sim, "f1d0c1a1-0000-4000-8000-000000000001", permille=500)
    try:
        collector = w.collector(kill=True)
        with serve_portal(connection.settings_dict["NAME"]) as portal:
            stream = StatusStream(portal.url, NODE, token)

            async def agent() -> list[dict]:
                stop = asyncio.Event()
                runner = asyncio.create_task(stream.run(stop))
                try:
                    gpus, pods = collector.collect()  # the backstop runs here and stops it
                    stream.offer(gpus, pods, collector.take_findings())
                    return await asyncio.to_thread(
                        wait_for, lambda: len(_findings()) >= 2, 10, "findings stored"
                    )
                finally:
                    stop.set()
                    await runner

            asyncio.run(agent())
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

    support = get_user_model().objects.create_user(username="sup", password="x", is_staff=True)
    support.groups.add(Group.objects.get_or_create(name="Support")[0])
    client = Client()
    client.force_login(support)
    page = client.get(reverse("support_console")).content.decode()
    live = reverse("project_status", args=[project.pk])
    for kind, words in (
        ("backstop-stopped", f"Backstop on {NODE} stopped a process of acme-ml/pod-a"),
        ("nvml-disagrees", f"NVML and the core disagree on {NODE} for acme-ml/pod-a"),
    ):
        item = page.split(f'<li data-kind="{kind}">', 1)[1].split("</li>", 1)[0]
        assert words in item, item
        assert f'<a href="{live}">live page</a>' in item, item
