"""`make run`'s demo agents (deploy.local.agents) against the real control plane and a real
portal: nodes created, tokens issued through manage.py, agents started detached, slices
published, agents connected to the portal, and stopped again. Its own node prefix and no metrics
ports, so a running demo is left alone."""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.db import connection

from deploy import supervisor as procs
from deploy.devcluster.nodes import delete_fake_nodes
from deploy.local import agents
from portal.agents.models import NodeToken
from tests.cluster.nodeagent.conftest import REPO, agent_slices
from tests.helpers.portal import serve_portal
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _connected(nodes: list[str]) -> bool:
    rows = NodeToken.objects.filter(node_name__in=nodes, last_seen_at__isnull=False)
    return sorted((r.node_name, len(r.gpus)) for r in rows) == [(n, 4) for n in nodes]


@pytest.fixture
def state():
    """Short on purpose: the plugin's unix sockets live below it (108-byte path limit)."""
    path = Path(tempfile.mkdtemp(prefix="tr-demo-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_demo_agents_start_publish_connect_and_stop(kube_cluster, state):
    api = kube_cluster.api_client
    prefix = f"tr-demo-{secrets.token_hex(2)}"
    nodes = agents.node_names(prefix)
    db = connection.settings_dict["NAME"]
    env = dict(os.environ, TRANCHE_DEBUG="1", TRANCHE_DB_NAME=db, TRANCHE_DB_CONN_MAX_AGE="0")
    env["PYTHONPATH"] = str(REPO)
    began = time.monotonic()
    pids: list[int | None] = []
    try:
        with serve_portal(db) as portal:
            port = urlsplit(portal.url).port
            lines = agents.start(state, env, port, prefix=prefix, metrics_base=0)
            assert len(lines) == 2, lines

            def logs() -> str:
                return "\n".join(
                    (state / "logs" / f"agent-{n}.log").read_text()[-2000:] for n in nodes
                )

            pids = [procs.read_pid(state / "run" / f"agent-{n}.pid") for n in nodes]
            assert all(pids), f"{pids}\n{logs()}"

            def running(check):
                def poll():
                    assert all(procs.pid_alive(p) for p in pids), "an agent exited:\n" + logs()
                    return check()

                return poll

            published = running(lambda: len(agent_slices(api, nodes)) == 2)
            wait_for(published, 60, lambda: "slices\n" + logs())
            wait_for(running(lambda: _connected(nodes)), 30, lambda: "the portal\n" + logs())
            for n in nodes:
                token = state / "agents" / f"{n}.token"
                assert stat.S_IMODE(token.stat().st_mode) == 0o600
            print(f"demo agents publishing and connected after {time.monotonic() - began:.1f}s")  # noqa: T201
    finally:
        agents.stop(state, prefix)
        delete_fake_nodes(api, nodes)
    assert not any(p and procs.pid_alive(p) for p in pids), f"agents left running: {pids}"
