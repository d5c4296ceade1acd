"""Fault, the deterministic case of issue #30 (acceptance 3): the API server frozen (SIGSTOP)
while a reconcile is inside its apply, Redis stopped, the API server resumed (SIGCONT), Redis
back. Two runs in a row, on one worker, one portal and one agent.

Each step is seen, not hoped for: the reconcile is "in its apply" when the frozen API server
holds unread bytes on a connection that belongs to the worker's process tree (the kernel keeps
accepting connections and buffering requests for a stopped process; `/proc/net/tcp` shows
them); Redis is stopped while that is so, and the API server resumed once the worker logged the
broker lost and the agent's frames of the outage were refused for now.

What must hold: the worker process is never replaced (supervisor restarts 0, same pid), the
order ends active exactly once, and every change the agent reported during the outage is
stored once Redis is back. Real pieces: a control plane of the test's own (`private_cluster`),
a Redis of its own (append-only), the worker as `make run` starts it under `deploy.supervisor`,
the portal served by daphne, and the agent's own status client (`AgentLoop`); the watcher's
bindings are written as the watcher writes them.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis as redis_lib
from celery import Celery
from django.db import connection

from deploy import supervisor
from deploy.devcluster import launcher
from portal.agents import services as agent_services
from tests.cluster.controller.supervised_worker import start_worker, tail
from tests.helpers.agent_loop import AgentLoop, bind_pods, pod, stored_gib
from tests.helpers.own_redis import OwnRedis
from tests.helpers.portal import Portal, serve_portal
from tests.helpers.wait import wait_for

CLASS = "tranche-v100-8g"
RUNS = 2
NODE = "kwok-gpu-0"
# The controller's read timeout is 20 s (controller/apply.py): resumed before it, the apply that
# was in flight is the one that completes (not a retry after a timeout).
RESUME_WITHIN_SECONDS = 15.0
RESYNC_DONE = re.compile(r"controller\.resync_all\[[^\]]+\] succeeded")


def _tree(root: int) -> set[int]:
    """`root` and every process below it."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    found, todo = {root}, [root]
    while todo:
        parent = todo.pop()
        kids = [pid for pid, ppid in parents.items() if ppid == parent and pid not in found]
        found.update(kids)
        todo.extend(kids)
    return found


def _inodes(pids: set[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    return inodes


def _tcp() -> list[tuple[int, int, int, str]]:
    """(local port, remote port, bytes unread, inode) of every TCP socket."""
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            rx = int(f[4].split(":")[1], 16)
            rows.append((int(f[1].split(":")[1], 16), int(f[2].split(":")[1], 16), rx, f[9]))
    return rows


def requests_held_by_frozen_apiserver(worker_pid: int, apiserver_port: int) -> int:
    """How many of the worker's connections to the API server carry a request it has not read."""
    mine = _inodes(_tree(worker_pid))
    rows = _tcp()
    ports = {local for local, remote, _, inode in rows
             if inode in mine and remote == apiserver_port}  # fmt: skip
    return sum(1 for local, remote, rx, _ in rows
               if local == apiserver_port and remote in ports and rx > 0)  # fmt: skip


@dataclass
class Stack:
    """The pieces one run uses: the frozen API server's pid and port, the worker, the agent."""

    apiserver: int
    apiserver_port: int
    redis: OwnRedis
    broker: Celery
    queue: str
    log: Path
    status: Path
    worker_pid: int
    portal: Portal
    agent: AgentLoop

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self) -> str:
        return f"worker log:\n{tail(self.log)}"


def _one_run(stack: Stack, tenant) -> dict:
    """Freeze mid-apply, stop Redis, resume, Redis back; returns the run's figures."""
    from portal.orders.models import Order, OrderEvent

    # Idle first: every resync sent on (re)connecting has finished, so the request the frozen
    # API server holds can only be this run's reconcile.
    wait_for(lambda: len(RESYNC_DONE.findall(stack.text()))
             >= stack.text().count("broker connected: sent"), 120,
             "the worker's resyncs to finish", stack.tail)  # fmt: skip
    ns, project = tenant.project.namespace, tenant.project.pk
    bindings = redis_lib.Redis.from_url(stack.redis.url)
    bind_pods(bindings, project, NODE, "a", "b", "c")
    bindings.close()
    stack.agent.set_pods(pod(ns, "a", 1), pod(ns, "b", 1))
    wait_for(lambda: stored_gib(ns) == {"a": 1, "b": 1}, 30, "the agent's rows before the outage",
             stack.portal.log_tail)  # fmt: skip
    order = tenant.order(CLASS, 1)
    lost = stack.text().count("Connection to broker lost")
    connected = stack.text().count("broker connected: sent")

    os.kill(stack.apiserver, signal.SIGSTOP)
    try:
        frozen_at = time.monotonic()
        stack.broker.send_task("controller.reconcile_project", args=[project], queue=stack.queue)
        held = wait_for(
            lambda: requests_held_by_frozen_apiserver(stack.worker_pid, stack.apiserver_port),
            10, "the reconcile's request held by the frozen API server", stack.tail,
        )  # fmt: skip
        in_apply = time.monotonic() - frozen_at
        stack.redis.stop()
        wait_for(lambda: stack.text().count("Connection to broker lost") > lost, 10,
                 "the worker to notice Redis gone", stack.tail)  # fmt: skip
        seq = stack.agent.stream.seq
        stack.agent.set_pods(pod(ns, "a", 5), pod(ns, "c", 3))  # a changed, b gone, c new
        refused = wait_for(
            lambda: stack.agent.stream.seq >= seq + 2 and dict(stack.agent.stream.refusals),
            10, "the agent's frames refused for now during the outage", stack.portal.log_tail,
        )  # fmt: skip
        assert all("Redis" in why for why in refused.values()), refused
        assert time.monotonic() - frozen_at < RESUME_WITHIN_SECONDS, (
            "the setup took longer than the controller's read timeout allows: the apply in "
            "flight would have timed out instead of completing"
        )
    finally:
        os.kill(stack.apiserver, signal.SIGCONT)
    resumed = time.monotonic()
    # The apply in flight completes with Redis still away (its ack cannot reach it).
    wait_for(lambda: Order.objects.filter(pk=order.pk, state=Order.State.ACTIVE).exists(), 30,
             "the order to be active", stack.tail)  # fmt: skip
    active_after = time.monotonic() - resumed
    stack.redis.start()
    back = time.monotonic()
    wait_for(lambda: stored_gib(ns) == {"a": 5, "c": 3}, 15,
             lambda: f"every change of the outage stored (now {stored_gib(ns)})",
             stack.portal.log_tail)  # fmt: skip
    stored_after = time.monotonic() - back
    wait_for(lambda: stack.agent.stream.pending == {}, 10, "nothing left to resend")
    wait_for(lambda: stack.text().count("broker connected: sent") > connected, 30,
             "the worker to reconnect", stack.tail)  # fmt: skip
    activations = OrderEvent.objects.filter(order=order, to_state="active").count()
    assert activations == 1, f"order {order.pk} became active {activations} times"
    return {"held": held, "in_apply_s": round(in_apply, 2),
            "active_after_resume_s": round(active_after, 2),
            "frames_stored_after_redis_s": round(stored_after, 2)}  # fmt: skip


@pytest.mark.timeout(600)
def test_frozen_apiserver_mid_apply_then_redis_stopped(
    make_tenant, controller_settings, private_cluster, tmp_path, monkeypatch
):
    cluster = private_cluster
    apiserver = launcher.running_pid(cluster, launcher.component(cluster, "kube-apiserver"))
    assert apiserver, "the private control plane's kube-apiserver is not running"
    redis = OwnRedis(tmp_path / "redis", append_only=True)
    redis.start()
    monkeypatch.setenv("TRANCHE_REDIS_URL", redis.url)  # the served portal's Redis
    queue = f"frozen-{secrets.token_hex(3)}"
    database = connection.settings_dict["NAME"]
    worker = start_worker(
        tmp_path, queue, redis.url, cluster.kubeconfig, database, TRANCHE_DB_POOL_TIMEOUT="10"
    )
    sup, status, log = worker.process, worker.status, worker.log
    token = agent_services.issue_node_token(NODE)
    try:
        with serve_portal(connection.settings_dict["NAME"]) as portal:
            agent = AgentLoop(portal.url, NODE, token)
            try:
                wait_for(lambda: RESYNC_DONE.search(tail(log, 400)), 120,
                         lambda: f"the worker's first resync (log:\n{tail(log)})")  # fmt: skip
                worker_pid = supervisor.read_status(status)["worker"]["pid"]
                stack = Stack(apiserver, cluster.ports.apiserver, redis,
                              Celery(broker=redis.url, set_as_current=False), queue, log,
                              status, worker_pid, portal, agent)  # fmt: skip
                figures = []
                for _ in range(RUNS):
                    figures.append(_one_run(stack, make_tenant()))
                    worker = supervisor.read_status(status)["worker"]
                    assert worker["restarts"] == 0, stack.tail()
                    assert worker["pid"] == worker_pid, stack.tail()
            finally:
                agent.stop()
        text = stack.text()
        assert "Unrecoverable error" not in text, stack.tail()
        print(  # noqa: T201
            f"{RUNS} runs of API server frozen mid-apply + Redis stopped: worker never replaced "
            f"(pid {worker_pid}); per run {figures}; acks handed to the visibility timeout: "
            f"{text.count('could not acknowledge')}, restores: {text.count('could not hand')}"
        )
    finally:
        os.kill(apiserver, signal.SIGCONT)  # whatever happened above, never left frozen
        supervisor.stop_pid(sup.pid, timeout=30)
        sup.wait(10)
        redis.stop()
