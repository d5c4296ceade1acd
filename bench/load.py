"""Portal under load at fleet size, on loopback: the quota and live pages, and live fan-out.

Starts its own portal (daphne, the `make run` pool size) on a free loopback port against a
database of its own (`tranche_load`, dropped and created each run) and this worktree's Redis,
seeds issue #18's fleet in bulk (`bench.scalekit.fleet_rows`: 500 organizations with one project
each, 4,000 pods with status, cluster view and history, orders, ledger, audit), then measures
with `bench.scalekit.pages` (the functions bench/scale.py calls against its own fleet):
- pages, open loop: 50 browsers each loading the quota or the live page once a second, latency
  from the scheduled send time (the goal: p95 <= 100 ms; the model is in bench/scalekit/pages.py);
- pages, closed loop: 1/10/50/200 clients with no think time (saturation throughput);
- fan-out: 50 and 200 logged-in websocket viewers of one project's live page and one node agent
  sending status frames at a fixed rate; deliveries/s and delivery lag p50/p99 (send -> receive);
- PostgreSQL: sessions of the bench database sampled every 0.1 s; the peak is compared with the
  pool total (portal pool + this process's pool).
Every phase has a fixed duration and the portal is stopped at the end; results go to
bench/results/load.json. Run: `.venv/bin/python bench/load.py [--seconds 10] [--quick]`.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

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
FIGURES = ("p50_ms", "p95_ms", "p99_ms")
FAN_OUT_FIGURES = ("delivered_per_s", "lag_p50_s", "lag_p99_s", "frames_acked")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def prepare_database() -> None:
    """A fresh database each run: the figures are for the fleet seeded below, nothing more."""
    import psycopg
    from django.conf import settings

    db = settings.DATABASES["default"]
    admin = psycopg.connect(
        dbname="postgres", user=db["USER"], password=db["PASSWORD"], host=db["HOST"],
        port=db["PORT"], autocommit=True,
    )  # fmt: skip
    with admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{DB_NAME}"')
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "--noinput", "-v0"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True,
    )  # fmt: skip


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


def start_portal(port: int, log: Path, tree: Path = ROOT) -> subprocess.Popen:
    """The portal of `tree` on this database: this tree's as the chart runs it (production
    settings, `portal.serve` one process per core, the agents' ingest as its own process group
    on `proc.ingest_url`); an extracted earlier commit's as `make run` ran it (daphne)."""
    from bench.scalekit import production

    state = os.environ.get("TRANCHE_STATE_DIR", str(ROOT / ".state"))
    env = {**os.environ, "PYTHONPATH": str(tree), "TRANCHE_DB_POOL_MAX_SIZE": str(PORTAL_POOL),
           "TRANCHE_STATE_DIR": state}  # fmt: skip
    ingest = None
    if tree == ROOT:
        env = production.production_env(env)  # make run's pool per process: PORTAL_POOL
        production.collect_static(env)
        argv = production.portal_argv(port)
        ingest_port = free_port()
        ingest = subprocess.Popen(
            production.portal_argv(ingest_port, processes=1, role="ingest"), cwd=tree, env=env,
            stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    else:
        daphne = str(Path(sys.executable).parent / "daphne")
        argv = [daphne, "-b", "127.0.0.1", "-p", str(port), "portal.asgi:application"]
    proc = subprocess.Popen(argv, cwd=tree, env=env, stdout=log.open("ab"),
                            stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    proc.ingest = ingest
    proc.ingest_url = f"http://127.0.0.1:{ingest_port}" if ingest else f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    ports = [port] + ([int(urlsplit(proc.ingest_url).port)] if ingest else [])
    while time.monotonic() < deadline:
        if all(_answers(p) for p in ports):
            return proc
        time.sleep(0.2)
    stop_portal(proc)
    raise SystemExit(f"the portal did not start; see {log}")


def _answers(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    except OSError:
        return False


def stop_portal(proc: subprocess.Popen) -> None:
    for p in (proc, getattr(proc, "ingest", None)):
        if p is None:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)  # the server and its processes
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)


def tree_pids(pid: int) -> list[int]:
    """`pid` and every process below it (a multi-process server's workers)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            with contextlib.suppress(OSError):
                todo += [int(c) for c in (task / "children").read_text().split()]
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU time so far of a process and its children (Linux /proc)."""
    total = 0
    for p in tree_pids(pid):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def pages_with_fleet_reporting(args: argparse.Namespace, fleet, url: str,
                               ingest_url: str = "") -> tuple[dict, dict]:  # fmt: skip
    """50 browsers while every other node's agent reports all its pods at `args.agents_hz` (to
    the ingest process group where the portal has one)."""
    from bench.scalekit import pages
    from bench.scalekit.agent_load import AgentLoad

    who = (url, fleet.username, fleet.password, fleet.project_id)
    with AgentLoad(ingest_url or url, fleet.agents, args.agents_hz) as load:
        row = pages.measure_pages(*who, clients=50, seconds=2 * args.seconds, closed_seconds=0)
    return row, load.summary()


def _fan_out_phase(args: argparse.Namespace, fleet, portal: subprocess.Popen, url: str) -> dict:
    from bench.scalekit import pages

    who = (url, fleet.username, fleet.password, fleet.project_id)
    cpu = cpu_seconds(portal.pid)
    row = pages.measure_fanout(*who, fleet.node, fleet.node_token, 200, args.rate, args.seconds,
                               pod=fleet.pod)  # fmt: skip
    flat = {f"fan-out 200: {k}": row[k] for k in FAN_OUT_FIGURES}
    flat["fan-out 200: portal CPU s"] = round(cpu_seconds(portal.pid) - cpu, 1)
    return flat


def _pages_phase(args: argparse.Namespace, fleet, portal: subprocess.Popen, url: str) -> dict:
    from bench.scalekit import pages

    row = pages.measure_pages(url, fleet.username, fleet.password, fleet.project_id, clients=50,
                              seconds=2 * args.seconds)  # fmt: skip
    flat = {f"{p} {k}": row[p][k] for p in ("quota", "live") for k in FIGURES}
    flat["closed loop 50: requests/s"] = row["closed_loop"]["per_s"]
    return flat


def _fleet_phase(args: argparse.Namespace, fleet, portal: subprocess.Popen, url: str) -> dict:
    row, load = pages_with_fleet_reporting(args, fleet, url, portal.ingest_url)
    flat = {f"{p} {k}, fleet reporting": row[p][k] for p in ("quota", "live") for k in FIGURES}
    flat["fleet frames acked/s"] = load["acked_per_s"]
    flat["fleet ack lag p99 s"] = load["ack_lag_p99_s"]
    return flat


def measure_round(args: argparse.Namespace, fleet, portal: subprocess.Popen, url: str) -> dict:
    """The figures compared before/after, flat: fan-out at 200 viewers, pages at 50 browsers,
    pages with the fleet reporting last (a portal that cannot keep up with the fleet is left
    with a backlog of frames). A phase that fails is recorded as such, not in the medians."""
    phases = []
    if args.only != "pages":
        phases.append(("fan-out", _fan_out_phase))
    if args.only != "fan-out":
        phases.append(("pages", _pages_phase))
        if args.agents_hz > 0:
            phases.append(("pages, fleet reporting", _fleet_phase))
    flat: dict = {}
    for name, phase in phases:
        try:
            flat.update(phase(args, fleet, portal, url))
        except Exception as exc:  # a failed phase is a result of the round, not an abort
            flat[f"{name} failed"] = f"{type(exc).__name__}: {exc}"[:300]
    return flat


def compare(args: argparse.Namespace, fleet, url: str, log: Path) -> dict:
    """The portal of commit `args.before` and this tree's, on the same seeded database,
    alternating (ABBA) so that a busier machine slows both alike; the median of each figure
    over `args.rounds` runs of each, side by side."""
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    port = int(urlsplit(url).port)
    with tempfile.TemporaryDirectory(prefix="tranche-before-") as tmp:
        archive = subprocess.run(["git", "archive", args.before], cwd=ROOT, capture_output=True,
                                 check=True).stdout  # fmt: skip
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        trees = [("before", Path(tmp)), ("after", ROOT)]
        for r in range(args.rounds):
            for label, tree in trees if r % 2 == 0 else trees[::-1]:
                portal = start_portal(port, log, tree)
                try:
                    runs[label].append(measure_round(args, fleet, portal, url))
                finally:
                    stop_portal(portal)
                print(label, json.dumps(runs[label][-1]), flush=True)
    keys = [k for row in runs["before"] + runs["after"] for k in row if "failed" not in k]
    medians = {
        label: {
            k: round(statistics.median([r[k] for r in rows if k in r] or [float("nan")]), 3)
            for k in dict.fromkeys(keys)
        }
        for label, rows in runs.items()
    }
    failures = {label: [v for r in rows for k, v in r.items() if "failed" in k]
                for label, rows in runs.items()}  # fmt: skip
    print(f"medians of {args.rounds} runs each: before ({args.before}) -> after (this tree)")
    for key, value in medians["before"].items():
        after = medians["after"][key]
        print(f"  {key:<40} {round(value, 3):>9} -> {round(after, 3)}")
    print(f"failed phases: {failures}")
    return {"before_ref": args.before, "rounds": args.rounds, "medians": medians,
            "failures": failures, "runs": runs}  # fmt: skip


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per page level and fan-out")
    parser.add_argument("--long-seconds", type=float, default=30.0, help="the 200-client level")
    parser.add_argument("--rate", type=float, default=10.0, help="agent frames/s in fan-out")
    parser.add_argument("--orgs", type=int, default=500, help="organizations (one project each)")
    parser.add_argument("--quick", action="store_true", help="3 s per phase (a smoke run)")
    parser.add_argument("--only", choices=["pages", "fan-out"], help="run one part")
    parser.add_argument(
        "--before",
        help="compare with this commit's portal (pages at 50 browsers, fan-out at 200 viewers)",
    )
    parser.add_argument(
        "--agents-hz", type=float, default=1.0,
        help="frames/s of each other node's agent during a second pages run (0: none)",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="runs of each tree (--before)")
    args = parser.parse_args()
    if args.quick:
        args.seconds = args.long_seconds = 3.0
    return args


def main() -> None:
    args = arguments()
    import django

    prepare_database()
    django.setup()
    from bench.scalekit import pages
    from bench.scalekit.fleet_rows import seed_fleet

    began = time.monotonic()
    fleet = seed_fleet(orgs=args.orgs)
    print(
        f"seeded {fleet.projects} projects, {fleet.pods} pods in {time.monotonic() - began:.0f} s"
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    who = (url, fleet.username, fleet.password, fleet.project_id)
    log = Path(tempfile.mkdtemp(prefix="tranche-load-")) / "portal.log"
    sampler = ConnectionSampler()
    sampler.start()
    results: dict = {"pool_total": PORTAL_POOL + BENCH_POOL, "projects": fleet.projects,
                     "pods": fleet.pods, "pages": [], "fan_out": []}  # fmt: skip
    # The machine is shared: the load average says how much else competed for its cores.
    results["load_average_at_start"] = os.getloadavg()[0]
    if args.before:
        results["compare"] = compare(args, fleet, url, log)
        sampler.stop.set()
        report(results, sampler, log, "load_compare.json")
        return
    portal = start_portal(port, log)
    try:
        if args.only != "fan-out":
            row = pages.measure_pages(*who, clients=50, seconds=2 * args.seconds, closed_seconds=0)
            results["pages_open_loop_50"] = row
            print(json.dumps({"open loop, 50 browsers": row}), flush=True)
            if args.agents_hz > 0:
                row, load = pages_with_fleet_reporting(args, fleet, url, portal.ingest_url)
                results["pages_open_loop_50_fleet_reporting"] = {**row, "fleet": load}
                print(json.dumps({"open loop, 50 browsers, fleet reporting": row,
                                  "fleet": load}), flush=True)  # fmt: skip
            cookies = [pages.login(*who[:3]) for _ in range(5)]
        for clients in (1, 10, 50, 200) if args.only != "fan-out" else ():
            secs = args.long_seconds if clients == 200 else args.seconds
            row = pages.closed_loop(url, cookies, fleet.project_id, clients, secs)
            row.update(clients=clients, seconds=secs)
            results["pages"].append(row)
            print(json.dumps({"closed loop": row}), flush=True)
        for viewers in (50, 200) if args.only != "pages" else ():
            row = pages.measure_fanout(
                *who, fleet.node, fleet.node_token, viewers, args.rate, args.seconds, pod=fleet.pod
            )
            results["fan_out"].append(row)
            print(json.dumps(row), flush=True)
    finally:
        stop_portal(portal)
        sampler.stop.set()
        sampler.join(5)
    report(results, sampler, log)


def report(results: dict, sampler: ConnectionSampler, log: Path, name: str = "load.json") -> None:
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
    (out / name).write_text(json.dumps(results, indent=1))
    print(f"results: {out / name}")


if __name__ == "__main__":
    main()
