"""The portal of an earlier commit, run as it ran then, and this tree's, run as the chart does,
side by side in one run: `/healthz`, the quota page and the live page at 50 closed-loop clients.

Run: `.venv/bin/python bench/portal_modes.py [--before 7382faa] [--seconds 15] [--rounds 2]`.

Checks `--before` out into a temporary `git worktree` under /tmp (removed at the end), gives
each tree a database of its own (`tranche_modes_before` / `_after`: the schema changed between
them) migrated and seeded by that tree's own code with issue #18's fleet (`bench/scalekit/
fleet_rows.py`: 500 organizations, 4,000 pods with status and history), and alternates the two
portals (ABBA) on one port:
- before: `daphne` with `TRANCHE_DEBUG=1` and a pool of 20, `make run`'s portal at that commit;
- after: `python -m portal.serve` in production mode (`bench/scalekit/production.py`): one
  process per core, TRANCHE_DEBUG unset, static files collected.
Each phase is a closed loop (`bench/scalekit/hammer.py`: clients spread over 4 processes); the
load average is written beside every figure (the machine is shared). Results go to
bench/results/portal_modes.json; the medians per tree and their ratios are printed.
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
PHASES = ("healthz", "quota", "live")
FIGS = ("per_s", "p50_ms", "p95_ms", "p99_ms", "errors")


def tree_env(tree: Path, db: str) -> dict[str, str]:
    state = os.environ.get("TRANCHE_STATE_DIR", str(ROOT / ".state"))
    return {**os.environ, "PYTHONPATH": str(tree), "TRANCHE_STATE_DIR": state,
            "TRANCHE_DB_NAME": db, "TRANCHE_DEBUG": "1"}  # fmt: skip


def seed(tree: Path, db: str, orgs: int) -> dict:
    """A fresh database `db`, migrated and seeded by `tree`'s own code; the fleet's login."""
    import psycopg
    from django.conf import settings

    conf = settings.DATABASES["default"]
    admin = psycopg.connect(
        dbname="postgres", user=conf["USER"], password=conf["PASSWORD"], host=conf["HOST"],
        port=conf["PORT"], autocommit=True,
    )  # fmt: skip
    with admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{db}"')
    env = {**tree_env(tree, db), "TRANCHE_DB_STATEMENT_TIMEOUT_MS": "0"}  # bulk inserts
    python = sys.executable
    subprocess.run([python, "manage.py", "migrate", "--noinput", "-v0"], cwd=tree, env=env,
                   check=True)  # fmt: skip
    out = subprocess.run([python, "-c", SEED.format(orgs=orgs)], cwd=tree, env=env, check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def drop(db: str) -> None:
    import psycopg
    from django.conf import settings

    conf = settings.DATABASES["default"]
    admin = psycopg.connect(dbname="postgres", user=conf["USER"], password=conf["PASSWORD"],
                            host=conf["HOST"], port=conf["PORT"], autocommit=True)  # fmt: skip
    with admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def start(label: str, tree: Path, port: int, log: Path) -> subprocess.Popen:
    from bench.scalekit import production

    base = tree_env(tree, f"tranche_modes_{label}")
    if label == "before":
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
    raise SystemExit(f"the {label} portal did not start; see {log}")


def stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def measure(url: str, cookie: str, project_id: int, clients: int, seconds: float) -> dict:
    from bench.scalekit.hammer import closed_loop

    paths = {"healthz": ("/healthz", ""), "quota": (f"/projects/{project_id}/", cookie),
             "live": (f"/projects/{project_id}/status/", cookie)}  # fmt: skip
    row = {}
    for phase in PHASES:
        path, ck = paths[phase]
        closed_loop(url, path, clients, 2, cookie=ck)  # warm every process of the server
        row[phase] = closed_loop(url, path, clients, seconds, cookie=ck)
        row[phase]["load_average"] = round(os.getloadavg()[0], 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="7382faa")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2, help="runs of each tree (ABBA)")
    parser.add_argument("--orgs", type=int, default=500)
    args = parser.parse_args()
    import django

    django.setup()
    from bench.scalekit import pages, production

    production.collect_static(production.production_env())
    port = load.free_port()
    url = f"http://127.0.0.1:{port}"
    tmp = Path(tempfile.mkdtemp(prefix="tranche-modes-"))
    before_tree = tmp / f"tree-{args.before}"
    subprocess.run(["git", "worktree", "add", "--detach", str(before_tree), args.before],
                   cwd=ROOT, check=True, capture_output=True)  # fmt: skip
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    order = [("before", before_tree), ("after", ROOT)]
    try:
        fleets = {label: seed(tree, f"tranche_modes_{label}", args.orgs) for label, tree in order}
        print(f"seeded: {json.dumps(fleets)}", flush=True)
        for r in range(args.rounds):
            for label, tree in order if r % 2 == 0 else order[::-1]:
                proc = start(label, tree, port, tmp / f"{label}.log")
                try:
                    fleet = fleets[label]
                    cookie = pages.login(url, fleet["username"], fleet["password"])
                    row = measure(url, cookie, fleet["project_id"], args.clients, args.seconds)
                finally:
                    stop(proc)
                runs[label].append(row)
                print(label, json.dumps(row), flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(before_tree)], cwd=ROOT,
                       check=False, capture_output=True)  # fmt: skip
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=False)
        for label, _tree in order:
            drop(f"tranche_modes_{label}")
    medians = {label: {p: {f: statistics.median(r[p][f] for r in rows) for f in FIGS}
                       for p in PHASES} for label, rows in runs.items()}  # fmt: skip
    print(f"medians of {args.rounds} runs each, {args.clients} closed-loop clients, "
          f"{args.seconds:.0f} s per phase; cores {os.cpu_count()}")  # fmt: skip
    print(f"  before: {args.before}, daphne, TRANCHE_DEBUG=1 | after: this tree, portal.serve "
          f"production, {production.processes()} processes")  # fmt: skip
    for p in PHASES:
        b, a = medians["before"][p], medians["after"][p]
        ratio = a["per_s"] / b["per_s"] if b["per_s"] else float("nan")
        print(
            f"  {p:<8} {b['per_s']:>8}/s p95 {b['p95_ms']:>7} ms err {b['errors']:<4} -> "
            f"{a['per_s']:>8}/s p95 {a['p95_ms']:>7} ms err {a['errors']:<4} x{ratio:.2f}"
        )
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "portal_modes.json").write_text(json.dumps(
        {"before_ref": args.before, "clients": args.clients, "seconds": args.seconds,
         "medians": medians, "runs": runs}, indent=1))  # fmt: skip
    print(f"results: {out / 'portal_modes.json'}")


if __name__ == "__main__":
    main()
