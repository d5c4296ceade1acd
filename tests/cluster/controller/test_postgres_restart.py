"""Fault: PostgreSQL down for 10 s under a running platform; everything comes back by itself.

A PostgreSQL of this test's own (its own data folder and free port, started and stopped with
`deploy.local.services`, so the worktree's database is never touched) backs a whole platform
under the `make run` supervisor: portal, worker, beat, watcher and a simulated node agent. While
PostgreSQL is down the portal answers 503 naming the database, and a pod's claim is allocated
by the scheduler. After it returns: /readyz is 200 with fresh worker, beat and watcher
heartbeats, the agent reports again, the quota figures show the claim allocated during the
outage, and no process was restarted (the supervisor's restart count stays 0).

Before (b6aafaa): the watcher died at the next cluster event after a PostgreSQL restart and
/readyz still said 200.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from kubernetes import client

from deploy import supervisor
from deploy.devcluster.nodes import delete_fake_nodes
from deploy.local import agents, platform, services

ROOT = Path(__file__).resolve().parents[3]
CLASS = "tranche-v100-8g"
OUTAGE_SECONDS = 10.0
HEARTBEAT_SECONDS = 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str, cookie: str = "") -> tuple[int, str]:
    headers = {"Cookie": cookie} if cookie else {}
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 (loopback http)
    try:
        with urllib.request.urlopen(request, timeout=20) as resp:  # noqa: S310 (loopback)
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def _tail(logs: Path, name: str, lines: int = 25) -> str:
    try:
        text = (logs / f"{name}.log").read_text(errors="replace")
    except OSError:
        return f"({name}: no log)"
    return f"--- {name}\n" + "\n".join(text.splitlines()[-lines:])


SETUP = """
import json, secrets
from portal.catalog.seed import ensure_catalogue
from portal.orders.services import place_order
from portal.tenants.models import Membership
from portal.tenants.services import sign_up
products = {p.device_class: p for p in ensure_catalogue()}
tag = secrets.token_hex(3)
user, org, project = sign_up(username=f"pg-{tag}", email=f"pg{tag}@example.test",
    password="x-Pass-1234567", organization_name=f"pg {tag}", project_name="ml")
m = Membership.objects.get(user=user, organization=org)
place_order(membership=m, project=project, product=products["%s"], quantity=2,
    idempotency_key=tag)
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
store = SessionStore()
store[SESSION_KEY] = str(user.pk)
store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
store[HASH_SESSION_KEY] = user.get_session_auth_hash()
store.create()
cookie = f"{settings.SESSION_COOKIE_NAME}={store.session_key}"
print(json.dumps({"project": project.pk, "namespace": project.namespace, "cookie": cookie}))
""".replace("%s", CLASS)


def _pod(node: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "during-outage"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": CLASS}],
            "containers": [
                {
                    "name": "c",
                    "image": "registry.invalid/c:1",
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }


@pytest.mark.timeout(600)
def test_postgres_restart_heals_every_process(kube_cluster, tmp_path) -> None:
    # Short: the agents' unix sockets live below it (107 bytes at most).
    state = Path(tempfile.mkdtemp(prefix="pg", dir="/tmp"))
    lay = services.Layout(
        state=state, pg_port=_free_port(), redis_port=0, pg_root=services._pg_root(state)
    )
    services.start_postgres(lay)
    port, tag = _free_port(), secrets.token_hex(3)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TRANCHE_DEBUG": "1",
        "TRANCHE_STATE_DIR": str(state),
        "TRANCHE_DB_PORT": str(lay.pg_port),
        "TRANCHE_DB_NAME": "tranche",
        "TRANCHE_REDIS_URL": settings.REDIS_URL,
        "TRANCHE_CELERY_QUEUE": f"pg-{tag}",
        "TRANCHE_CHANNELS_PREFIX": f"pg-{tag}",
        "TRANCHE_HEARTBEAT_SECONDS": str(HEARTBEAT_SECONDS),
        "KUBECONFIG": str(kube_cluster.kubeconfig),
    }
    env.pop("TRANCHE_TEST_DB_NAME", None)
    manage = [sys.executable, str(ROOT / "manage.py")]
    try:
        subprocess.run([*manage, "migrate", "--noinput", "-v0"], env=env, cwd=ROOT, check=True)
        made = json.loads(
            subprocess.run(
                [*manage, "shell", "-c", SETUP], env=env, cwd=ROOT, check=True,
                capture_output=True, text=True,
            ).stdout.strip().splitlines()[-1]
        )  # fmt: skip
    except BaseException:  # a failed setup stops this PostgreSQL too, or it outlives the run
        services.stop_postgres(lay)
        raise
    spec = {
        name: {"argv": argv, "env": platform.role_env(name)}
        for name, argv in platform.processes().items()
    }
    spec["portal"]["argv"][spec["portal"]["argv"].index("--port") + 1] = str(port)
    spec.pop("ingest")  # the agents below report to the pages' port, which serves them too
    spec["beat"]["argv"][-1] = str(tmp_path / "celerybeat-schedule")
    worker = spec["worker"]["argv"]
    worker[worker.index("-Q") + 1] = env["TRANCHE_CELERY_QUEUE"]
    prefix = f"pg-{tag}"
    nodes = agents.node_names(prefix)
    for name, argv in agents.commands(state, env, port, prefix, metrics_base=0).items():
        spec[name] = {"argv": argv, "env": {}}
    run = state / "run"
    run.mkdir(parents=True, exist_ok=True)
    (run / "spec.json").write_text(json.dumps(spec))
    status = run / "status.json"
    logs = state / "logs"
    sup = subprocess.Popen(
        [sys.executable, "-m", "deploy.supervisor", str(run / "spec.json"), str(status)],
        cwd=ROOT, env=env, start_new_session=True,
    )  # fmt: skip
    db = psycopg.connect(
        dbname="tranche", user="tranche", host="127.0.0.1", port=lay.pg_port, autocommit=True,
        password=(state / "secrets" / "db-password").read_text().strip(),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    core = client.CoreV1Api(kube_cluster.api_client)
    resource = client.ResourceV1Api(kube_cluster.api_client)

    def all_logs() -> str:
        return "\n".join(_tail(logs, n) for n in spec)

    def ready() -> dict | None:
        code, body = _get(f"{url}/readyz")
        data = json.loads(body) if code in (200, 503) else {}
        fresh = "no heartbeat yet" not in data.get("checks", {}).get("processes", {}).get(
            "message", "x"
        )
        return data if code == 200 and fresh else None

    def order_active() -> bool:
        return (
            db.execute(
                "SELECT count(*) FROM orders_order WHERE project_id = %s AND state = 'active'",
                [made["project"]],
            ).fetchone()[0]
            == 1
        )

    def agents_seen_since(moment: float) -> bool:
        rows = db.execute(
            "SELECT count(*) FROM agents_nodetoken WHERE node_name = ANY(%s) "
            "AND last_seen_at > to_timestamp(%s)",
            [nodes, moment],
        ).fetchone()[0]
        return rows == len(nodes)

    def wait(check, timeout: float, what: str):
        """wait_for, with every process's log tail in the failure message."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if found := check():
                return found
            time.sleep(0.2)
        pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}\n{all_logs()}")

    try:
        wait(ready, 120, "the platform to be ready")
        wait(order_active, 60, "the order to be active")
        wait(lambda: agents_seen_since(time.time() - 5), 60, "the agents to report")

        # PostgreSQL goes away for 10 s; meanwhile the scheduler allocates a claim.
        assert services.stop_postgres(lay)
        down_at = time.monotonic()
        code, body = _get(f"{url}/projects/{made['project']}/", made["cookie"])  # the quota page
        assert code == 503, body
        assert "the database" in body, body
        assert "try again shortly" in body, body
        code, body = _get(f"{url}/readyz")
        assert code == 503, body
        assert "PostgreSQL unreachable" in body, body
        core.create_namespaced_pod(made["namespace"], _pod(nodes[0]))

        def claim_allocated() -> bool:
            claims = resource.list_namespaced_resource_claim(made["namespace"]).items
            return any(c.status and c.status.allocation for c in claims)

        wait(claim_allocated, OUTAGE_SECONDS, "the claim to be allocated during the outage")
        while time.monotonic() - down_at < OUTAGE_SECONDS:  # the outage lasts its 10 s
            time.sleep(0.5)
        services.start_postgres(lay)
        back_at, back_wall = time.monotonic(), time.time()
        db = psycopg.connect(
            dbname="tranche", user="tranche", host="127.0.0.1", port=lay.pg_port,
            autocommit=True, password=(state / "secrets" / "db-password").read_text().strip(),
        )  # fmt: skip

        def allocated_on_quota() -> bool:
            row = db.execute(
                "SELECT u.allocated FROM cluster_projectusage u JOIN catalog_product p "
                "ON p.id = u.product_id WHERE u.project_id = %s AND p.device_class = %s",
                [made["project"], CLASS],
            ).fetchone()
            return bool(row and row[0] == 1)

        wait(allocated_on_quota, 60, "the watcher to store the claim")
        took = time.monotonic() - back_at
        wait(ready, 60, "/readyz to be 200 with fresh heartbeats")
        wait(lambda: agents_seen_since(back_wall), 60, "the agents to report again")
        code, body = _get(f"{url}/projects/{made['project']}/", made["cookie"])
        assert code == 200, body[-2000:]
        healed = time.monotonic() - back_at
        restarts = {n: s["restarts"] for n, s in supervisor.read_status(status).items()}
        print(  # noqa: T201
            f"claim allocated during the outage on the quota {took:.1f}s after PostgreSQL "
            f"returned; everything ready {healed:.1f}s after; restarts {restarts}"
        )
        assert not any(restarts.values()), f"processes were restarted: {restarts}\n{all_logs()}"
    finally:
        supervisor.stop_pid(sup.pid, timeout=40)
        sup.wait(10)
        db.close()
        services.stop_postgres(lay)
        delete_fake_nodes(kube_cluster.api_client, nodes)
        core.delete_namespace(made["namespace"], propagation_policy="Background")
        shutil.rmtree(lay.pg_root, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)
