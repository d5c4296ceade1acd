"""The portal of an earlier commit, run as it ran then, and this tree's, run as the chart does,
side by side in one run: `/healthz`, the quota page and the live page at 50 closed-loop clients.

Run: `.venv/bin/python bench/portal_modes.py [--before 7382faa] [--seconds 15] [--rounds 2]`.

Checks `--before` out into a temporary `git worktree` under /tmp (removed at the end), gives
each tree a database of its own (`tranche_modes_<label>_<pid>_<tag>`, created by this run and
the only databases it drops: the schema changed between them) migrated and seeded by that
tree's own code with issue #18's fleet (`bench/scalekit/fleet_rows.py`: 500 organizations,
4,000 pods with status and history) in the bench's own Redis index (`bench/scalekit/citizen.py`:
the run refuses an index that holds keys, so a running stack's are never touched), and
alternates the two portals (ABBA) on one port:
- before: `daphne` with `TRANCHE_DEBUG=1` and a pool of 20, `make run`'s portal at that commit;
- after: `python -m portal.serve` in production mode (`bench/scalekit/production.py`): one
  process per core, TRANCHE_DEBUG unset, static files collected.
Phases: `/healthz` (answered before Django), the floor (a trivial view behind the same
middleware and login: `FLOOR_URLS`, added to each tree's URLs by a settings module the bench
writes to its temporary folder), the quota page and the live page; each page's req/s is printed
beside the floor's as a ratio (page/floor: how close the page is to what the framework allows).
Each phase is a closed loop (`bench/scalekit/hammer.py`: clients spread over 4 processes); the
load average and the portal processes' CPU per answer (not the load generator's) are written
beside every figure (the machine is shared). Results go to bench/results/portal_modes.json; the
medians per tree and their ratios are printed.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import load  # sets this bench's database and pool before Django

ROOT = load.ROOT
SEED = (
    "import json, django; django.setup(); from bench.scalekit.fleet_rows import seed_fleet; "
    "f = seed_fleet(orgs={orgs}); print(json.dumps({{'username': f.username, "
    "'password': f.password, 'project_id': f.project_id, 'pods': f.pods}}))"
)
PHASES = ("healthz", "floor", "quota", "live")
PAGES = ("quota", "live")
FLOOR_PATH = "/bench-floor/"
# The floor: a view that does nothing but what every page's frame around it does (the whole
# middleware stack, the session and the logged-in user), in a URLconf that extends the tree's.
FLOOR_SETTINGS = (
    'from portal.settings import *  # noqa\nROOT_URLCONF = "tranche_bench_floor_urls"\n'
)
FLOOR_URLS = """from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.urls import path
from portal.urls import *  # noqa: the tree's handlers
from portal.urls import urlpatterns as tree_patterns


@login_required
def floor(request):
    return HttpResponse("floor")


urlpatterns = [path("bench-floor/", floor, name="bench_floor"), *tree_patterns]
"""
FIGS = ("per_s", "p50_ms", "p95_ms", "p99_ms", "errors", "cpu_ms")


def tree_env(tree: Path, db: str, redis_url: str) -> dict[str, str]:
    state = os.environ.get("TRANCHE_STATE_DIR", str(ROOT / ".state"))
    return {**os.environ, "PYTHONPATH": str(tree), "TRANCHE_STATE_DIR": state,
            "TRANCHE_DB_NAME": db, "TRANCHE_REDIS_URL": redis_url,
            "TRANCHE_DEBUG": "1"}  # fmt: skip


def seed(tree: Path, db: str, redis_url: str, orgs: int) -> dict:
    """Database `db` (created by this run) migrated and seeded by `tree`'s own code; the
    fleet's login."""
    env = {**tree_env(tree, db, redis_url), "TRANCHE_DB_STATEMENT_TIMEOUT_MS": "0"}  # bulk
    python = sys.executable
    subprocess.run([python, "manage.py", "migrate", "--noinput", "-v0"], cwd=tree, env=env,
                   check=True)  # fmt: skip
    out = subprocess.run([python, "-c", SEED.format(orgs=orgs)], cwd=tree, env=env, check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def write_floor(folder: Path) -> Path:
    """The floor's settings and URLconf modules, importable from `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tranche_bench_floor_settings.py").write_text(FLOOR_SETTINGS)
    (folder / "tranche_bench_floor_urls.py").write_text(FLOOR_URLS)
    return folder


def start(  # noqa: PLR0917
    daphne: bool, tree: Path, db: str, redis_url: str, floor: Path, port: int, log: Path
) -> subprocess.Popen:
    """`tree`'s portal on `port`: `make run`'s daphne in debug mode, or production portal.serve."""
    from bench.scalekit import production

    base = tree_env(tree, db, redis_url)
    base["PYTHONPATH"] = f"{tree}{os.pathsep}{floor}"
    base["DJANGO_SETTINGS_MODULE"] = "tranche_bench_floor_settings"
    if daphne:
        env = {**base, "TRANCHE_DB_POOL_MAX_SIZE": str(load.PORTAL_POOL)}
        argv = [str(Path(sys.executable).parent / "daphne"), "-b", "127.0.0.1", "-p", str(port),
                "portal.asgi:application"]  # fmt: skip
    else:
        from deploy.local.platform import POOL_SIZES

        pool = str(POOL_SIZES["portal"])  # per process, as make run gives it
        env = {**production.production_env(base), "TRANCHE_DB_POOL_MAX_SIZE": pool}
        argv = production.portal_argv(port)
    proc = subprocess.Popen(argv, cwd=tree, env=env, stdout=log.open("ab"),
                            stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return proc
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    stop(proc)
    raise SystemExit(f"the portal of {tree} did not start; see {log}")


def stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU seconds of the live processes of process group `pgid` (the portal)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:  # after the name: state, ppid, pgrp, ... utime, stime
                total += int(fields[11]) + int(fields[12])
    return total / tick


def measure(  # noqa: PLR0917
    url: str, cookie: str, project_id: int, clients: int, seconds: float, pgid: int
) -> dict:
    from bench.scalekit.hammer import closed_loop

    paths = {"healthz": ("/healthz", ""), "floor": (FLOOR_PATH, cookie),
             "quota": (f"/projects/{project_id}/", cookie),
             "live": (f"/projects/{project_id}/status/", cookie)}  # fmt: skip
    row = {}
    for phase in PHASES:
        path, ck = paths[phase]
        closed_loop(url, path, clients, 2, cookie=ck)  # warm every process of the server
        cpu = group_cpu_seconds(pgid)
        row[phase] = closed_loop(url, path, clients, seconds, cookie=ck)
        # the portal's CPU per answer (its processes only: not the load generator's)
        spent = group_cpu_seconds(pgid) - cpu
        row[phase]["cpu_ms"] = round(1000 * spent / max(1, row[phase]["requests"]), 2)
        row[phase]["load_average"] = round(os.getloadavg()[0], 1)
    return row


def print_medians(medians: dict, runs: int, args: argparse.Namespace, processes: int) -> None:
    print(f"medians of {runs} runs each, {args.clients} closed-loop clients, "
          f"{args.seconds:.0f} s per phase; cores {os.cpu_count()}")  # fmt: skip
    before_server = "daphne, TRANCHE_DEBUG=1" if args.before_server == "daphne" else "as after"
    print(f"  before: {args.before}, {before_server} | after: this tree, portal.serve "
          f"production, {processes} processes")  # fmt: skip
    for p in PHASES:
        b, a = medians["before"][p], medians["after"][p]
        ratio = a["per_s"] / b["per_s"] if b["per_s"] else float("nan")
        print(
            f"  {p:<8} {b['per_s']:>8}/s p95 {b['p95_ms']:>7.1f} ms err {b['errors']:<4} -> "
            f"{a['per_s']:>8}/s p95 {a['p95_ms']:>7.1f} ms err {a['errors']:<4} x{ratio:.2f}"
            f"  portal CPU/request {b['cpu_ms']:.2f} -> {a['cpu_ms']:.2f} ms"
        )
    print("  each page beside the floor (page req/s / floor req/s, same tree and run):")
    for p in PAGES:
        cells = []
        for label in ("before", "after"):
            floor = medians[label]["floor"]["per_s"]
            cells.append(f"{label} {medians[label][p]['per_s'] / floor:.2f}" if floor else "-")
        print(f"  {p:<8} " + "  ".join(cells))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="083f417")
    parser.add_argument(
        "--before-server", choices=("serve", "daphne"), default="serve",
        help="serve: production portal.serve, as the after tree (the tree must have it); "
        "daphne: `make run`'s daphne with TRANCHE_DEBUG=1, as trees before issue #35 ran",
    )  # fmt: skip
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2, help="runs of each tree (ABBA)")
    parser.add_argument("--orgs", type=int, default=500)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    import django

    django.setup()
    from django.conf import settings

    from bench.scalekit import citizen, pages, production

    redis_url = citizen.bench_redis_url(settings.REDIS_URL)
    citizen.claim_redis(redis_url)
    databases = citizen.BenchDatabases(settings.DATABASES["default"])
    port = load.free_port()
    url = f"http://127.0.0.1:{port}"
    tmp = Path(tempfile.mkdtemp(prefix="tranche-modes-"))
    floor = write_floor(tmp / "floor")
    before_tree = tmp / f"tree-{args.before}"
    subprocess.run(["git", "worktree", "add", "--detach", str(before_tree), args.before],
                   cwd=ROOT, check=True, capture_output=True)  # fmt: skip
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    order = [("before", before_tree), ("after", ROOT)]
    production.collect_static(production.production_env())
    if args.before_server == "serve":
        production.collect_static(production.production_env(), tree=before_tree)
    try:
        names = {label: databases.create(citizen.unique_name(f"tranche_modes_{label}"))
                 for label, _tree in order}  # fmt: skip
        fleets = {label: seed(tree, names[label], redis_url, args.orgs) for label, tree in order}
        print(f"seeded: {json.dumps(fleets)}", flush=True)
        for r in range(args.rounds):
            for label, tree in order if r % 2 == 0 else order[::-1]:
                daphne = label == "before" and args.before_server == "daphne"
                proc = start(daphne, tree, names[label], redis_url, floor, port,
                             tmp / f"{label}.log")  # fmt: skip
                try:
                    fleet = fleets[label]
                    cookie = pages.login(url, fleet["username"], fleet["password"])
                    row = measure(url, cookie, fleet["project_id"], args.clients, args.seconds,
                                  proc.pid)  # fmt: skip
                finally:
                    stop(proc)
                runs[label].append(row)
                print(label, json.dumps(row), flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(before_tree)], cwd=ROOT,
                       check=False, capture_output=True)  # fmt: skip
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=False)
        databases.drop_all()
        citizen.release_redis(redis_url)
    medians = {label: {p: {f: statistics.median(r[p][f] for r in rows) for f in FIGS}
                       for p in PHASES} for label, rows in runs.items()}  # fmt: skip
    print_medians(medians, args.rounds, args, production.processes())
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "portal_modes.json").write_text(json.dumps(
        {"before_ref": args.before, "before_server": args.before_server, "clients": args.clients,
         "seconds": args.seconds, "medians": medians, "runs": runs}, indent=1))  # fmt: skip
    print(f"results: {out / 'portal_modes.json'}")


if __name__ == "__main__":
    main()
