"""Agents lose nothing (issues #30 and #32): the agent's real status client against a portal
served for real (daphne, PostgreSQL, a Redis of the test's own).

- Recreate rollout: one sample removes the old pod and reports the new one, which the watcher
  has not bound yet. Before, the portal refused that whole frame and the removal was never sent
  again (a phantom row for good). Now the removal is applied at once, the new pod is retried
  until the binding exists, and the old row never comes back.
- Redis outage: frames sent while Redis (the watcher's bindings, which every pod entry is
  checked against) is down are refused for now; every change of the outage (a pod's new
  figures, a removal, a new pod) is stored once Redis is back.
"""

from __future__ import annotations

import time

import pytest
import redis
from django.db import connection

from portal.agents import services
from tests.helpers.agent_loop import AgentLoop, bind_pods, pod, stored_gib
from tests.helpers.factories import make_world
from tests.helpers.own_redis import OwnRedis
from tests.helpers.portal import serve_portal
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
NODE = "kwok-gpu-0"


@pytest.fixture
def own_redis(tmp_path, monkeypatch):
    server = OwnRedis(tmp_path / "redis", append_only=True)
    server.start()
    monkeypatch.setenv("TRANCHE_REDIS_URL", server.url)  # the served portal's Redis
    yield server
    server.stop()


def test_recreate_rollout_leaves_no_phantom(own_redis):
    world = make_world()
    ns, project = world.project_a.namespace, world.project_a.pk
    bindings = redis.Redis.from_url(own_redis.url)
    bind_pods(bindings, project, NODE, "web-old")
    token = services.issue_node_token(NODE)
    with serve_portal(connection.settings_dict["NAME"]) as portal:
        agent = AgentLoop(portal.url, NODE, token)
        try:
            agent.set_pods(pod(ns, "web-old", 2))
            wait_for(lambda: stored_gib(ns) == {"web-old": 2}, 30, "the old pod's row",
                     portal.log_tail)  # fmt: skip
            agent.set_pods(pod(ns, "web-new", 1))  # Recreate: old gone, new not bound yet
            changed = time.monotonic()
            wait_for(lambda: "web-old" not in stored_gib(ns), 3, "the old pod's row to go",
                     portal.log_tail)  # fmt: skip
            gone_after = time.monotonic() - changed
            wait_for(lambda: (ns, "web-new") in agent.stream.refusals, 10,
                     "the portal to refuse the unbound pod for now")  # fmt: skip
            assert "no such pod scheduled" in next(iter(agent.stream.refusals.values()))
            bind_pods(bindings, project, NODE, "web-new")  # the watcher catches up
            bound = time.monotonic()
            wait_for(lambda: stored_gib(ns) == {"web-new": 1}, 10, "the new pod's row (retried)",
                     portal.log_tail)  # fmt: skip
            stored_after = time.monotonic() - bound
            # The old pod never comes back while the agent keeps reporting (the issue's phantom
            # stayed for 11 minutes): checked every second for 60 s.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                assert "web-old" not in stored_gib(ns), "the old pod's row came back"
                time.sleep(1)
        finally:
            agent.stop()
    print(  # noqa: T201
        f"recreate: old row gone {gone_after:.2f}s after the sample, new row stored "
        f"{stored_after:.2f}s after the watcher bound it; no phantom in 60 s"
    )


def test_frames_of_a_redis_outage_are_all_stored_afterwards(own_redis):
    world = make_world()
    ns, project = world.project_a.namespace, world.project_a.pk
    bindings = redis.Redis.from_url(own_redis.url)
    bind_pods(bindings, project, NODE, "a", "b", "c")
    token = services.issue_node_token(NODE)
    with serve_portal(connection.settings_dict["NAME"]) as portal:
        agent = AgentLoop(portal.url, NODE, token)
        try:
            agent.set_pods(pod(ns, "a", 1), pod(ns, "b", 1))
            wait_for(lambda: stored_gib(ns) == {"a": 1, "b": 1}, 30, "rows before the outage",
                     portal.log_tail)  # fmt: skip
            bindings.close()
            own_redis.stop()
            seq = agent.stream.seq
            agent.set_pods(pod(ns, "a", 5), pod(ns, "c", 3))  # a changed, b gone, c new
            refused = wait_for(
                lambda: agent.stream.seq >= seq + 4 and dict(agent.stream.refusals),
                30, "frames refused for now during the outage", portal.log_tail,
            )  # fmt: skip
            assert all("Redis" in why for why in refused.values()), refused
            during = stored_gib(ns)
            outage_frames = agent.stream.seq - seq
            own_redis.start()  # same port, append-only: the bindings are back
            back = time.monotonic()
            wait_for(lambda: stored_gib(ns) == {"a": 5, "c": 3}, 15,
                     lambda: f"every change of the outage stored (now {stored_gib(ns)})",
                     portal.log_tail)  # fmt: skip
            took = time.monotonic() - back
            wait_for(lambda: agent.stream.pending == {}, 10, "nothing left to resend")
        finally:
            agent.stop()
    print(  # noqa: T201
        f"redis outage: {outage_frames} frames sent during it, stored then {during}; every "
        f"change stored {took:.2f}s after Redis returned"
    )
