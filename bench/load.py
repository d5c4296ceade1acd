"""Portal under load, on loopback: pages at 1/10/50/200 clients, live fan-out at 50/200 viewers.

Starts its own portal (daphne, the `make run` pool size) on a free loopback port against a
database of its own (`tranche_load`, created and migrated on first use) and this worktree's
Redis, seeds users and a project, then:
- pages: for each client count, that many threads with keep-alive connections request the quota,
  orders and status pages of their project for a fixed time; p50/p95/p99 latency and 5xx count;
- fan-out: that many logged-in websocket viewers on one project's status page and one node agent
  sending status frames at a fixed rate; deliveries/s and delivery lag p50/p99 (send -> receive);
- PostgreSQL: sessions of the bench database sampled every 0.1 s; the peak is compared with the
  pool total (portal pool + this process's pool).
Every phase has a fixed duration and the portal is stopped at the end; results go to
bench/results/load.json. Run: `.venv/bin/python bench/load.py [--seconds 10] [--quick]`.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DB_NAME = "tranche_load"
PORTAL_POOL = 20  # deploy/local/platform.py POOL_SIZES["portal"]
BENCH_POOL = 2
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("TRANCHE_DEBUG", "1")
os.environ["TRANCHE_DB_NAME"] = DB_NAME
os.environ["TRANCHE_DB_POOL_MAX_SIZE"] = str(BENCH_POOL)
os.environ["TRANCHE_CHANNELS_PREFIX"] = f"load-{secrets.token_hex(3)}"
sys.path.insert(0, str(ROOT))
MIB = 1024 * 1024


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def prepare_database() -> None:
    import psycopg
    from django.conf import settings

    db = settings.DATABASES["default"]
    admin = psycopg.connect(
        dbname="postgres", user=db["USER"], password=db["PASSWORD"], host=db["HOST"],
        port=db["PORT"], autocommit=True,
    )  # fmt: skip
    with admin:
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME]).fetchone():
            admin.execute(f'CREATE DATABASE "{DB_NAME}"')
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "--noinput", "-v0"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True,
    )  # fmt: skip


def seed(users: int) -> tuple[list[str], int, str, str]:
    """Session cookies of `users` members of one project, its id and namespace, a node token."""
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    from portal.agents.services import issue_node_token
    from portal.tenants.models import Membership
    from portal.tenants.services import sign_up

    tag = secrets.token_hex(3)
    owner, org, project = sign_up(
        username=f"load-{tag}", email=f"load-{tag}@example.test", password=secrets.token_hex(12),
        organization_name=f"load {tag}", project_name="ml",
    )  # fmt: skip
    people = [owner]
    user_model = type(owner)
    for i in range(users - 1):
        user = user_model.objects.create_user(f"load-{tag}-{i}", password=None)
        Membership.objects.create(user=user, organization=org, role=Membership.Role.MEMBER)
        people.append(user)
    cookies = []
    for user in people:  # a logged-in session per user, without paying for password hashing
        store = SessionStore()
        store[SESSION_KEY] = str(user.pk)
        store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
        store[HASH_SESSION_KEY] = user.get_session_auth_hash()
        store.create()
        cookies.append(f"{settings.SESSION_COOKIE_NAME}={store.session_key}")
    token = issue_node_token(f"load-node-{tag}")
    return cookies, project.pk, project.namespace, f"load-node-{tag}:{token}"


class ConnectionSampler(threading.Thread):
    """Peak of PostgreSQL sessions on the bench database (this sampler's own excluded)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        import psycopg
        from django.conf import settings

        db = settings.DATABASES["default"]
        self.conn = psycopg.connect(
            dbname=DB_NAME, user=db["USER"], password=db["PASSWORD"], host=db["HOST"],
            port=db["PORT"], autocommit=True,
        )  # fmt: skip
        self.peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
        while not self.stop.is_set():
            (count,) = self.conn.execute(sql, [DB_NAME]).fetchone()
            self.peak = max(self.peak, count)
            self.stop.wait(0.1)


def start_portal(port: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRANCHE_DB_POOL_MAX_SIZE": str(PORTAL_POOL)}
    daphne = str(Path(sys.executable).parent / "daphne")
    proc = subprocess.Popen(
        [daphne, "-b", "127.0.0.1", "-p", str(port), "portal.asgi:application"],
        cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"the portal did not start; see {log}")


def page_load(port: int, clients: int, seconds: float, cookies: list[str], pid: int) -> dict:
    paths = [f"/projects/{pid}/", f"/projects/{pid}/orders/", f"/projects/{pid}/status/"]
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    errors = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {"Cookie": cookies[i % len(cookies)]}
        n = i
        while time.monotonic() < stop_at:
            path = paths[n % len(paths)]
            n += 1
            began = time.monotonic()
            try:
                conn.request("GET", path, headers=headers)
                resp = conn.getresponse()
                resp.read()
                status = resp.status
            except (OSError, http.client.HTTPException):
                with lock:
                    errors[0] += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                continue
            took = time.monotonic() - began
            with lock:
                latencies.append(took)
                statuses[status] = statuses.get(status, 0) + 1

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 90)
    return {
        "clients": clients,
        "requests": len(latencies),
        "per_s": round(len(latencies) / seconds, 1),
        "p50_ms": round(1000 * percentile(latencies, 50), 1),
        "p95_ms": round(1000 * percentile(latencies, 95), 1),
        "p99_ms": round(1000 * percentile(latencies, 99), 1),
        "5xx": sum(c for s, c in statuses.items() if s >= 500),
        "statuses": statuses,
        "connection_errors": errors[0],
    }


def status_frame(node: str, seq: int, namespace: str, pods: int) -> str:
    items = [
        {"namespace": namespace, "pod": f"p{k}", "uid": f"uid-p{k}", "gpu_uuid": "GPU-1",
         "memory_limit_bytes": 8192 * MIB, "memory_used_bytes": seq * MIB,
         "rejected_allocations": 0, "compute_target_percent": 50, "compute_used_percent": 10.0,
         "throttled_seconds": 0.0, "processes": 1}
        for k in range(pods)
    ]  # fmt: skip
    return json.dumps(
        {"type": "status", "node": node, "seq": seq, "ts": time.time(), "full": False,
         "dropped": 0, "gpus": [], "pods": items, "removed": []}
    )  # fmt: skip


async def fan_out(port: int, viewers: int, rate: float, seconds: float, world: tuple) -> dict:
    cookies, pid, ns, node_token = world
    import websockets

    node, token = node_token.split(":", 1)
    sent_at: dict[int, float] = {}
    lags: list[float] = []
    received = [0]
    last = [0.0]  # when the latest delivery arrived
    origin = f"http://127.0.0.1:{port}"

    async def viewer(i: int, ready: asyncio.Event, done: asyncio.Event) -> None:
        async with websockets.connect(
            f"ws://127.0.0.1:{port}/ws/projects/{pid}/status/",
            additional_headers={"Cookie": cookies[i % len(cookies)], "Origin": origin},
            open_timeout=60, max_size=2**22,
        ) as ws:  # fmt: skip
            json.loads(await ws.recv())  # the snapshot
            ready.set()
            while not done.is_set():
                try:
                    msg = json.loads(await asyncio.wait_for(ws.recv(), 1))
                except TimeoutError:
                    continue
                if msg.get("type") == "row":
                    seq = int(msg["cells"]["memory"].split(" ", 1)[0])
                    now = time.monotonic()
                    lags.append(now - sent_at.get(seq, now))
                    received[0] += 1
                    last[0] = now

    done = asyncio.Event()
    readies = [asyncio.Event() for _ in range(viewers)]
    tasks = []
    for i in range(viewers):  # connect in small waves: a handshake burst is not the subject
        tasks.append(asyncio.create_task(viewer(i, readies[i], done)))
        if i % 20 == 19:
            await asyncio.sleep(0.2)
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 120)
    acks = [0]
    async with websockets.connect(
        f"ws://127.0.0.1:{port}/ws/agent/",
        additional_headers={
            "Authorization": f"Bearer {token}",
            "X-Tranche-Node": node,
            "Origin": origin,
        },
    ) as agent:

        async def read_acks() -> None:
            async for raw in agent:
                if "ack" in json.loads(raw):
                    acks[0] += 1

        reader = asyncio.create_task(read_acks())
        began = time.monotonic()
        seq = 1
        while time.monotonic() - began < seconds:
            sent_at[seq] = time.monotonic()
            await agent.send(status_frame(node, seq, ns, 1))
            seq += 1
            await asyncio.sleep(max(0.0, began + seq / rate - time.monotonic()))
        await asyncio.sleep(3)  # deliveries in flight arrive; the rate counts until the last one
        elapsed = max(last[0], began + 1e-3) - began
        reader.cancel()
    done.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "viewers": viewers,
        "offered_msgs_per_s": rate,
        "sent": seq - 1,
        "acked": acks[0],
        "deliveries": received[0],
        "expected_deliveries": (seq - 1) * viewers,
        "deliveries_per_s": round(received[0] / elapsed, 1),
        "lag_p50_ms": round(1000 * percentile(lags, 50), 1),
        "lag_p99_ms": round(1000 * percentile(lags, 99), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per page level")
    parser.add_argument("--long-seconds", type=float, default=30.0, help="the 200-client level")
    parser.add_argument("--rate", type=float, default=10.0, help="agent frames/s in fan-out")
    parser.add_argument("--quick", action="store_true", help="3 s per phase (a smoke run)")
    parser.add_argument("--only", choices=["pages", "fan-out"], help="run one part")
    args = parser.parse_args()
    if args.quick:
        args.seconds = args.long_seconds = 3.0
    import django

    prepare_database()
    django.setup()
    cookies, pid, ns, node_token = seed(users=20)
    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="tranche-load-")) / "portal.log"
    sampler = ConnectionSampler()
    sampler.start()
    portal = start_portal(port, log)
    results: dict = {"pool_total": PORTAL_POOL + BENCH_POOL, "pages": [], "fan_out": []}
    # The machine is shared: the load average says how much else competed for its cores.
    results["load_average_at_start"] = os.getloadavg()[0]
    try:
        for clients in (1, 10, 50, 200) if args.only != "fan-out" else ():
            secs = args.long_seconds if clients == 200 else args.seconds
            row = page_load(port, clients, secs, cookies, pid)
            row["seconds"] = secs
            results["pages"].append(row)
            print(json.dumps(row), flush=True)
        for viewers in (50, 200) if args.only != "pages" else ():
            row = asyncio.run(
                fan_out(port, viewers, args.rate, args.seconds, (cookies, pid, ns, node_token))
            )
            results["fan_out"].append(row)
            print(json.dumps(row), flush=True)
    finally:
        portal.terminate()
        try:
            portal.wait(20)
        except subprocess.TimeoutExpired:
            portal.kill()
        sampler.stop.set()
        sampler.join(5)
    results["postgres_sessions_peak"] = sampler.peak
    results["load_average_at_end"] = os.getloadavg()[0]
    print(
        f"load average (1 min) {results['load_average_at_start']:.1f} at start, "
        f"{results['load_average_at_end']:.1f} at end; cores: {os.cpu_count()}"
    )
    results["portal_log"] = str(log)
    print(
        f"PostgreSQL sessions on {DB_NAME}: peak {sampler.peak} "
        f"(pool total {results['pool_total']}: portal {PORTAL_POOL} + bench {BENCH_POOL})"
    )
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "load.json").write_text(json.dumps(results, indent=1))
    print(f"results: {out / 'load.json'}")


if __name__ == "__main__":
    main()
