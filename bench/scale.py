"""Scale: a simulated GPU fleet with its tenants on a real control plane, measured step by step.

`python bench/scale.py --size full` builds, on a private control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kwok, started here and purged at the end): 125 kwok
nodes x 8 simulated GPUs (V100 and A100 nodes alternating) published as ResourceSlices, 500
organizations with one project each that bought 8 quarter slices through the portal's order
service, and 4,000 pods (one Deployment of 8 per project) whose claims the real scheduler
allocates, with the portal, a worker, beat and the watcher running as `make run` starts them. It
grows in four steps (1/8, 1/4, 1/2, full) and measures at each:

- bulk buy: every new tenant's order placed at once -> all active (p50/p99, total);
- claim allocation: new pods -> every claim allocated (claims/s);
- order -> active p50/p99 of resize orders while the fleet is busy, and the same project's
  objects applied directly with one server-side apply each (baseline), side by side: the ratio;
- no-op resync of every project: seconds, API calls by verb and kind, writes, database queries;
- watcher CPU seconds and peak RSS; the one node agent's CPU with 32 allocated claims (kwok
  runs no containers: the agent's cost per running container is not part of this bench);
- portal: quota and live page latency at 50 clients, websocket fan-out to 200 viewers;
- a node lost (Node deleted, its publisher gone): time until its pods' replacements are Pending
  as Unschedulable in the API, and until the portal's pod rows say "CapacityBusy"; then recovery.

`--size small` (CI's bench tier) runs two tiny steps with short phases: it asserts only that it
completes and writes its figures. Figures print as they come and go to
bench/results/scale.json (`--output` elsewhere); `--keep-logs DIR` keeps the processes' logs.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(ROOT), str(BENCH)]
DB_NAME = "tranche_scale"
os.environ["TRANCHE_DB_NAME"] = DB_NAME
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("TRANCHE_DEBUG", "1")
os.environ["TRANCHE_DB_POOL_MAX_SIZE"] = "4"
# The beat's resync would run beside the measured one; a long period keeps it out of the way
# (the measured resync is the same code).
os.environ["TRANCHE_RESYNC_SECONDS"] = "3600"

from scalekit import fleet  # noqa: E402
from scalekit.stack import Stack  # noqa: E402

# nodes per step; tenants = 4 x nodes, slices = 32 x nodes
# 4k (issue #35): 500 kwok nodes x 8 GPUs, 2,000 tenants, 16,000 slices, in three steps.
# quarter: full's first two steps (64 and 128 tenants), for side-by-side runs of two commits on a
# shared machine (the watcher's CPU per slice and the resync per project scale linearly).
SIZES = {"full": (16, 32, 63, 125), "4k": (125, 250, 500), "quarter": (16, 32), "small": (2, 4)}
PHASES = {  # seconds of each timed phase, and order probes per step
    "full": {"pages": 10, "fanout": 10, "agent": 20, "probes": 30, "fanout_viewers": 200},
    "4k": {"pages": 10, "fanout": 10, "agent": 20, "probes": 30, "fanout_viewers": 200},
    "quarter": {"pages": 10, "fanout": 10, "agent": 20, "probes": 30, "fanout_viewers": 200},
    "small": {"pages": 2, "fanout": 2, "agent": 3, "probes": 4, "fanout_viewers": 10},
}
PAGE_USER_PASSWORD = secrets.token_urlsafe(12)


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict:
    return {
        "n": len(values),
        "p50_s": round(percentile(values, 50), 3),
        "p99_s": round(percentile(values, 99), 3),
    }


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def prepare_database() -> None:
    """A fresh bench database (dropped and created), migrated."""
    import psycopg
    from psycopg import sql

    from portal import settings

    db = settings.DATABASES["default"]
    with psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], password=db["PASSWORD"],
        dbname="postgres", autocommit=True,
    ) as conn:  # fmt: skip
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DB_NAME))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DB_NAME)))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from portal.catalog.seed import ensure_a100_line, ensure_catalogue

    ensure_catalogue()
    ensure_a100_line()


class Scale:
    def __init__(self, size: str, stack: Stack) -> None:
        self.size = size
        self.phases = PHASES[size]
        self.stack = stack
        self.api = None
        self.tenants: list[fleet.Tenant] = []
        self.nodes = 0
        self.quantity: dict[int, int] = {}
        self.steps: list[dict] = []

    # -- growth -----------------------------------------------------------------------------
    def grow(self, nodes: int) -> dict:
        fig: dict = {"nodes": nodes, "gpus": nodes * fleet.GPUS_PER_NODE}
        new_nodes = range(self.nodes, nodes)
        began = time.monotonic()
        fleet.create_nodes(self.api, new_nodes)
        if fleet.AGENT_NODE_INDEX in new_nodes:
            self.start_agent()
        fleet.wait(
            lambda: sum(fleet.published_devices(self.api).values()) >= fig["gpus"],
            120, f"{fig['gpus']} GPUs published", 1,
        )  # fmt: skip
        fig["nodes_ready_and_published_s"] = round(time.monotonic() - began, 1)
        self.nodes = nodes

        first = len(self.tenants)
        indexes = range(first, nodes * fleet.TENANTS_PER_NODE)
        new = []
        if first == 0:  # the tenant whose pages are measured logs in with a password
            new += fleet.create_tenants(range(1), password=PAGE_USER_PASSWORD)
            indexes = range(1, indexes.stop)
        new += fleet.create_tenants(indexes)
        self.tenants += new
        began = time.monotonic()
        ids = [fleet.order(t, fleet.SLICES_PER_TENANT) for t in new]
        for t in new:
            self.quantity[t.index] = fleet.SLICES_PER_TENANT
        placed = time.monotonic() - began
        fleet.wait(lambda: fleet.active_count(ids) == len(ids), 900, f"{len(ids)} orders active", 1)
        fig["tenants"] = len(self.tenants)
        fig["bulk_buy"] = {
            **summary(list(fleet.order_latencies(ids).values())),
            "orders": len(ids),
            "placed_in_s": round(placed, 1),
            "all_active_in_s": round(time.monotonic() - began, 1),
        }
        say(f"{nodes} nodes: {len(ids)} new orders active: {fig['bulk_buy']}")

        slices = nodes * fleet.GPUS_PER_NODE * fleet.SLICES_PER_GPU
        fig["allocation"] = self.allocate(new, slices)
        fleet.wait(
            lambda: sum(fleet.running_on(fleet.bench_pods(self.api)).values()) >= slices,
            300, f"{slices} pods Running", 2,
        )  # fmt: skip
        return fig

    def allocate(self, new: list[fleet.Tenant], slices: int) -> dict:
        """The new tenants' Deployments, as tenants make them: the controller manager creates
        the pods and their claims, the scheduler allocates each claim as it appears. The
        creation pace and how far allocation lags behind it are separate figures.

        (Stopping the scheduler until every claim existed, to time it on a full backlog, made
        the v1.37.2 scheduler refuse now and then one share of a device that had room for it,
        a pod then retried only by the 5-minute flush: docs/devcluster.md.)"""
        began = time.monotonic()
        fleet.create_workloads(self.api, new)
        created = allocated = None
        last_done, progress_at, stalled = -1, 0.0, 0.0
        while allocated is None:
            claims, done = fleet.claim_counts(self.api)
            now = time.monotonic() - began
            if created is None and claims >= slices:
                created = now
            if done != last_done:
                last_done, progress_at = done, now
            stalled = max(stalled, now - progress_at)
            if done >= slices:
                allocated = now
            elif now > 1200:
                raise TimeoutError(f"{done} of {slices} claims allocated after 1200 s")
            else:
                time.sleep(0.5)
        new_claims = len(new) * fleet.SLICES_PER_TENANT
        fig = {
            "claims_total": slices,
            "claims_new": new_claims,
            "claims_created_s": round(created, 1),
            "created_per_s": round(new_claims / created, 1),
            "allocated_s": round(allocated, 1),
            "claims_per_s": round(new_claims / allocated, 1),
            "allocation_lag_s": round(allocated - created, 1),
            # the longest wait without one more claim allocated (the scheduler's refusals of a
            # share that fits are retried only by its 5-minute flush: docs/devcluster.md)
            "longest_stall_s": round(stalled, 1),
        }
        say(f"{self.nodes} nodes: allocation {fig}")
        return fig

    def start_agent(self) -> None:
        """The one node agent (node 0, a kwok node): simulated GPUs published and status
        streamed to the portal. kwok runs no containers, so it reads no region: containers run
        only on the dev cluster's real nodes, which this fleet-size bench does not start."""
        from scalekit.agent import agent_argv

        from portal.agents.services import issue_node_token

        node = fleet.node_name(fleet.AGENT_NODE_INDEX)
        token = self.stack.state / "agents" / f"{node}.token"
        token.parent.mkdir(parents=True, exist_ok=True)
        token.write_text(issue_node_token(node) + "\n")
        token.chmod(0o600)
        self.stack.spawn(
            "agent", agent_argv(node, self.stack.state, self.stack.kubeconfig, self.stack.port)
        )

    def agent(self) -> dict:
        """The agent's own CPU with its node's claims allocated (no containers: see
        `start_agent`), and the fleet publisher's per node."""
        from scalekit.agent import measure_agent_cpu

        node = fleet.node_name(fleet.AGENT_NODE_INDEX)
        running = fleet.running_on(fleet.bench_pods(self.api))[node]
        pub0 = self.stack.stats("fleet").cpu_seconds
        fig = measure_agent_cpu(self.stack.procs["agent"].pid, self.phases["agent"])
        pub = self.stack.stats("fleet")
        publisher_nodes = self.nodes - 1
        return {
            "node": node,
            "pods_allocated": running,
            **fig,
            "fleet_publisher": {
                "nodes": publisher_nodes,
                "cpu_percent": round(100 * (pub.cpu_seconds - pub0) / fig["seconds"], 2),
                "cpu_percent_per_node": round(
                    100 * (pub.cpu_seconds - pub0) / fig["seconds"] / max(1, publisher_nodes), 4
                ),
                "rss_mib": pub.rss_mib,
            },
        }

    # -- measurements ------------------------------------------------------------------------
    def order_probes(self, count: int) -> dict:
        """Resize orders one after another (each waits for active); then the baseline: the same
        project's objects applied directly, one server-side apply each."""
        from controller import desired
        from controller.apply import Applier, shared_api_client
        from controller.render.bundle import render_project

        step = max(1, len(self.tenants) // count)
        chosen = self.tenants[::step][:count]
        latencies, direct = [], []
        worker_log = self.stack.state / "logs" / "worker.log"
        offset = worker_log.stat().st_size
        for t in chosen:
            self.quantity[t.index] = 9 if self.quantity[t.index] == 8 else 8
            oid = fleet.order(t, self.quantity[t.index])
            fleet.wait(lambda oid=oid: fleet.active_count([oid]) == 1, 120, f"order {oid}", 0.02)
            latencies += fleet.order_latencies([oid]).values()
        applier = Applier(shared_api_client())
        for t in chosen:
            objects = render_project(desired.load_project(t.project_id).spec)
            began = time.perf_counter()
            for obj in objects:
                applier.apply(obj)
            direct.append(time.perf_counter() - began)
        ctl, base = summary(latencies), summary(direct)
        inside = self._reconcile_split(worker_log, offset, {t.project_id for t in chosen})
        return {
            "controller": ctl,
            "reconcile_task": inside,
            "direct_apply": {**base, "objects_per_project": len(objects)},
            "ratio_p50": round(ctl["p50_s"] / base["p50_s"], 2),
            "ratio_p99": round(ctl["p99_s"] / base["p99_s"], 2),
        }

    @staticmethod
    def _reconcile_split(log: Path, offset: int, projects: set[int]) -> dict:
        """Where the probes' reconciles spent their time, from the worker's task results: the
        whole task, its API requests, and the rest (database and Python)."""
        import re

        with log.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        total, api = [], []
        pattern = r"'project': (\d+), .*?'ms': ([\d.]+), 'api_ms': ([\d.]+)"
        for pid, ms, api_ms in re.findall(pattern, text):
            if int(pid) in projects:
                total.append(float(ms) / 1000)
                api.append(float(api_ms) / 1000)
        rest = [t - a for t, a in zip(total, api, strict=True)]
        return {
            "n": len(total),
            "p50_s": round(percentile(total, 50), 3),
            "api_p50_s": round(percentile(api, 50), 3),
            "database_and_python_p50_s": round(percentile(rest, 50), 3),
        }

    def portal(self) -> dict:
        """Quota and live pages at 50 clients, and fan-out of agent reports to the live page's
        viewers, for tenant 0 (scalekit.pages)."""
        try:
            from scalekit import pages
        except ImportError:
            return {"not_measured": "scalekit.pages is not there"}
        tenant = self.tenants[0]
        user = f"scale-{tenant.index}"
        fig = {
            "pages": pages.measure_pages(
                self.stack.url, user, PAGE_USER_PASSWORD, tenant.project_id,
                clients=50, seconds=self.phases["pages"],
            )
        }  # fmt: skip
        # The real agent's node and token (the portal takes a pod's report only from its
        # node); the viewers watch a project with a pod there. The bench's frames carry a
        # marker that makes the portal ignore the agent's own reports of that pod meanwhile.
        node = fleet.node_name(fleet.AGENT_NODE_INDEX)
        token = (self.stack.state / "agents" / f"{node}.token").read_text().strip()
        watched = self._tenant_with_pod_on(node)
        if watched is None:
            fig["fanout"] = {"not_measured": f"no project has a pod on {node}"}
            return fig
        viewer = self._with_password(watched)

        def bound():  # the watcher's view (the ingest checks it) can trail the API's by a flush
            try:
                return pages.bound_pod(watched.project_id, node)
            except LookupError:
                return None

        pod = fleet.wait(bound, 60, f"the watcher to bind a pod of {watched.namespace} to {node}")
        fig["fanout"] = pages.measure_fanout(
            self.stack.url, viewer, PAGE_USER_PASSWORD, watched.project_id, node, token,
            viewers=self.phases["fanout_viewers"], rate_hz=10, seconds=self.phases["fanout"],
            pod=pod,
        )  # fmt: skip
        return fig

    def _tenant_with_pod_on(self, node: str) -> fleet.Tenant | None:
        by_namespace = {t.namespace: t for t in self.tenants}
        for p in fleet.bench_pods(self.api):
            if p["spec"].get("nodeName") == node and p["metadata"]["namespace"] in by_namespace:
                return by_namespace[p["metadata"]["namespace"]]
        return None

    @staticmethod
    def _with_password(tenant: fleet.Tenant) -> str:
        """The tenant's username, its password set to the bench's (one hash, once)."""
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.get(pk=tenant.user_id)
        if not user.check_password(PAGE_USER_PASSWORD):
            user.set_password(PAGE_USER_PASSWORD)
            user.save(update_fields=["password"])
        return user.get_username()

    def resync(self) -> dict:
        try:
            from scalekit import resync
        except ImportError:
            return self._resync_fallback()
        return resync.measure_noop_resync()

    def _resync_fallback(self) -> dict:
        from collections import Counter

        from django.db import connection

        from controller import apply, reconcile

        queries = Counter()

        def count(execute, sql, params, many, context):
            queries["n"] += 1
            return execute(sql, params, many, context)

        before = Counter(apply.CALLS)
        began = time.monotonic()
        with connection.execute_wrapper(count):
            results = reconcile.resync_all()
        calls = apply.CALLS - before
        return {
            "projects": len(results),
            "seconds": round(time.monotonic() - began, 2),
            "writes": sum(r.writes for r in results),
            "calls": dict(calls),
            "queries": queries["n"],
        }

    def watcher(self) -> dict:
        st = self.stack.stats("watcher")
        return {
            "cpu_seconds": st.cpu_seconds,
            "rss_mib": st.rss_mib,
            "peak_rss_mib": st.peak_rss_mib,
        }

    def node_lost(self) -> dict:
        """Delete the last fleet node; replacements of its pods must go Pending (the fleet is
        full) and the portal must say so; then put the node back and wait for recovery."""
        from kubernetes import client

        from portal.cluster.models import PodState
        from tranche.pod_reasons import CAPACITY_BUSY

        index = self.nodes - 1
        name = fleet.node_name(index)
        pods = [p for p in fleet.bench_pods(self.api) if p["spec"].get("nodeName") == name]
        lost: dict[str, int] = {}
        for p in pods:
            lost[p["metadata"]["namespace"]] = lost.get(p["metadata"]["namespace"], 0) + 1
        began = time.monotonic()
        client.CoreV1Api(self.api).delete_node(name)

        def pending_in_api() -> bool:
            now = fleet.bench_pods(self.api)
            if any(p["spec"].get("nodeName") == name for p in now):
                return False
            waiting: dict[str, int] = {}
            for p in now:
                if fleet.unschedulable(p):
                    ns = p["metadata"]["namespace"]
                    waiting[ns] = waiting.get(ns, 0) + 1
            return all(waiting.get(ns, 0) >= n for ns, n in lost.items())

        def shown_in_portal() -> bool:
            rows = PodState.objects.filter(
                namespace__in=list(lost), kind="Pod", phase="Pending", reason=CAPACITY_BUSY
            ).values_list("namespace", flat=True)
            seen: dict[str, int] = {}
            for ns in rows:
                seen[ns] = seen.get(ns, 0) + 1
            return all(seen.get(ns, 0) >= n for ns, n in lost.items())

        api_s = portal_s = None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and (api_s is None or portal_s is None):
            if api_s is None and pending_in_api():
                api_s = time.monotonic() - began
            if portal_s is None and shown_in_portal():
                portal_s = time.monotonic() - began
            time.sleep(0.5)
        shown = PodState.objects.filter(namespace__in=list(lost), kind="Pod")
        fig = {
            "portal_rows": sorted({f"{r.phase}/{r.reason}" for r in shown.only("phase", "reason")}),
            "node": name,
            "pods_lost": len(pods),
            "projects": len(lost),
            "pending_in_api_s": round(api_s, 1) if api_s is not None else None,
            "shown_in_portal_s": round(portal_s, 1) if portal_s is not None else None,
        }
        began = time.monotonic()
        fleet.create_nodes(self.api, range(index, index + 1))
        slices = self.nodes * fleet.GPUS_PER_NODE * fleet.SLICES_PER_GPU
        fleet.wait(
            lambda: sum(fleet.running_on(fleet.bench_pods(self.api)).values()) >= slices,
            300, "pods Running again after the node came back", 2,
        )  # fmt: skip
        fig["recovered_s"] = round(time.monotonic() - began, 1)
        return fig

    def step(self, nodes: int) -> dict:
        fig = self.grow(nodes)
        fig["watcher_after_growth"] = self.watcher()
        fig["agent"] = self.agent()
        say(f"{nodes} nodes: agent {fig['agent']}")
        fig["portal"] = self.portal()
        say(f"{nodes} nodes: portal {fig['portal']}")
        fig["order_to_active"] = self.order_probes(self.phases["probes"])
        say(f"{nodes} nodes: order -> active {fig['order_to_active']}")
        fig["noop_resync"] = self.resync()
        say(f"{nodes} nodes: no-op resync {fig['noop_resync']}")
        fig["node_lost"] = self.node_lost()
        say(f"{nodes} nodes: node lost {fig['node_lost']}")
        fig["watcher"] = self.watcher()
        say(f"{nodes} nodes: watcher {fig['watcher']}")
        return fig


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--output", type=Path, default=BENCH / "results" / "scale.json")
    parser.add_argument("--keep-logs", type=Path, help="copy the processes' logs here at the end")
    args = parser.parse_args()

    stack = Stack(db_name=DB_NAME)
    started = time.monotonic()
    result: dict = {"size": args.size, "cpus": os.cpu_count(), "steps": []}
    try:
        stack.start_services()
        say("starting a private control plane")
        stack.start_cluster()
        stack.configure()
        prepare_database()
        stack.start_platform()
        from deploy.local.agents import fleet_argv

        # One publisher for every fleet node (node 0 is the real agent's), re-checking each 5 s.
        stack.spawn("fleet", fleet_argv(stack.kubeconfig, fleet.FLEET, interval=5.0))
        say(f"portal {stack.url}, worker, beat, watcher running (logs {stack.state / 'logs'})")
        from controller.apply import shared_api_client

        scale = Scale(args.size, stack)
        scale.api = shared_api_client()
        for nodes in SIZES[args.size]:
            result["steps"].append(scale.step(nodes))
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(json.dumps(result, indent=2))
    finally:
        stack.close(keep_logs=args.keep_logs)
    result["wall_s"] = round(time.monotonic() - started, 1)
    args.output.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    say(f"written to {args.output}; everything the bench started is stopped")


if __name__ == "__main__":
    main()
