"""One idempotent `reconcile_project(project_id)`: make the cluster match what the project bought.

Steps, under a per-project PostgreSQL advisory lock (two workers never interleave; a killed worker's
lock dies with its connection): read the live managed objects and, if a cancel is open, the
project's allocated claims; build the desired objects from the database; apply what differs and
prune what is no longer desired. The database side is outcomes computed purely by
`controller.conditions.project_outcome` and each stored in ONE transaction through
`controller.store`: after the apply, orders move on (pending/provisioning → active, cancel →
cancelling/cancelled) with their conditions, history and audit rows and the subscriptions'
conditions, each row only when it changes. Open buys are marked provisioning only if the apply
is still running after `PROVISIONING_DELAY_SECONDS` (`store.DeferredOutcome`): a tenant never
sees a state that lasts milliseconds, and a quick reconcile is one write transaction. A crash
leaves pending or provisioning, which the next run finishes. Transient API errors propagate
(the task retries; the resync repairs anything left); a permanent refusal fails the open orders
and marks their subscriptions Failed with the API's reason and message, in one transaction too.

`resync_all()` (the periodic resync) reads the live objects once per kind for all namespaces and
every project's rows in a constant number of queries, and calls `reconcile_project` only for the
projects where that snapshot shows something to write (see its docstring for why that is safe).
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from controller import desired, store
from controller.apply import (
    NAMESPACED_MANAGED,
    PLATFORM_KINDS,
    Applier,
    ApplyError,
    TransientApiError,
    plan,
    shared_api_client,
)
from controller.conditions import Step, project_outcome
from controller.observe import allocated_by_class
from controller.render.bundle import render_platform, render_project
from tranche.orders import CANCEL
from tranche.products import ProductSpec

log = logging.getLogger(__name__)
LOCK_SPACE = 0x7472  # "tr": advisory-lock key space of the controller
LOCK_WAIT_SECONDS = 60.0
PLATFORM_TTL_SECONDS = 30.0
PROVISIONING_DELAY_SECONDS = 0.5  # a tenant sees "provisioning" only if the apply takes longer
_platform_synced: dict[tuple, float] = {}  # platform inputs -> monotonic time of last sync


class ProjectBusyError(TransientApiError):
    """Another worker held the project's lock for too long; retry later."""


@dataclass
class ReconcileResult:
    """What one reconcile did (for logs, tests and the benchmark)."""

    project_id: int
    changes: list[str] = field(default_factory=list)
    calls: Counter[str] = field(default_factory=Counter)
    orders: dict[int, str] = field(default_factory=dict)
    seconds: float = 0.0  # the whole reconcile, lock wait included
    api_seconds: float = 0.0  # of which in API requests (parallel reads overlap)

    @property
    def writes(self) -> int:
        return self.calls["apply"] + self.calls["delete"]


@contextmanager
def project_lock(project_id: int, wait: float = LOCK_WAIT_SECONDS) -> Iterator[None]:
    """Session-level advisory lock on the project (released on exit or when the process dies)."""
    deadline = time.monotonic() + wait
    with connection.cursor() as cur:
        while True:
            cur.execute("SELECT pg_try_advisory_lock(%s, %s)", [LOCK_SPACE, project_id])
            if cur.fetchone()[0]:
                break
            if time.monotonic() > deadline:
                raise ProjectBusyError(
                    f"project {project_id} is being reconciled by another worker"
                )
            time.sleep(0.05)
    try:
        yield
    finally:
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_SPACE, project_id])


def sync_platform(
    applier: Applier,
    prune: bool = True,
    cached: bool = False,
    products: list[ProductSpec] | None = None,
) -> list[str]:
    """DeviceClasses and policies. `cached` skips the reads if this process synced the same
    content recently (per-order reconciles); the resync always checks the live objects.
    `products`: the platform's products if the caller has read them already."""
    if products is None:
        products = desired.platform_products()
    # The renderers are pure: the same inputs render the same objects, so a recent sync of the
    # same inputs is known without rendering them again (the policies are most of a per-order
    # reconcile's Python time).
    inputs = (tuple(products), desired.platform_users(), desired.node_ports_allowed())
    if cached and time.monotonic() - _platform_synced.get(inputs, -1e9) < PLATFORM_TTL_SECONDS:
        return []
    objects = render_platform(*inputs)
    live = {k: applier.list_managed(*k) for k in PLATFORM_KINDS}
    changes = applier.sync(objects, live, prune=prune)
    _platform_synced[inputs] = time.monotonic()
    return changes


def _allocated_claims(applier: Applier, namespace: str) -> dict[str, int]:
    """Allocated claims per DeviceClass in the namespace (for cancel grace decisions)."""
    path = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
    return allocated_by_class(applier.list_path(path))


_READERS: dict[int, ThreadPoolExecutor] = {}  # pid -> pool (Celery forks: a pool per process)


def _readers() -> ThreadPoolExecutor:
    pid = os.getpid()
    if pid not in _READERS:
        _READERS[pid] = ThreadPoolExecutor(len(NAMESPACED_MANAGED) + 1, "reconcile-read")
    return _READERS[pid]


def _live_project(applier: Applier, namespace: str) -> dict[tuple[str, str], dict]:
    """The namespace and its managed objects of every kind, read at the same time: one after
    another they were 8 round trips, half of an order's time to active (bench/scale.py)."""
    pool = _readers()
    ns_read = pool.submit(applier.get, "v1", "Namespace", namespace)
    lists = {
        kind: pool.submit(applier.list_managed, *kind, namespace=namespace)
        for kind in NAMESPACED_MANAGED
    }
    ns = ns_read.result()
    listed = {kind: read.result() for kind, read in lists.items()}  # errors propagate here
    if ns is None:  # a namespace being created: whatever the lists saw is not ours yet
        return {("v1", "Namespace"): {}}
    return {("v1", "Namespace"): {namespace: ns}, **listed}


def reconcile_project(
    project_id: int,
    applier: Applier | None = None,
    platform_cached: bool = True,
    provisioning_delay: float = PROVISIONING_DELAY_SECONDS,
) -> ReconcileResult:
    """Make the project's namespace match the database. Idempotent; safe to run concurrently."""
    began = time.perf_counter()
    namespace = desired.project_namespace(project_id)
    applier = applier or Applier(shared_api_client())
    before, api_before = Counter(applier.calls), applier.api_seconds
    result = ReconcileResult(project_id)
    with project_lock(project_id):
        orders = desired.open_orders(project_id)
        # Step 1, only if the apply takes a while (one transaction): the open buys are being
        # provisioned.
        provisioning = store.DeferredOutcome(
            lambda: project_outcome(
                Step.APPLYING, orders=orders, subscriptions=desired.subscription_states(project_id)
            ),
            provisioning_delay,
        )
        try:
            products = desired.platform_products()  # read once: the platform and the project
            result.changes += sync_platform(
                applier, prune=False, cached=platform_cached, products=products
            )
            live = _live_project(applier, namespace)
            cancelling = any(o.kind == CANCEL for o in orders)
            allocated = (
                _allocated_claims(applier, namespace)
                if cancelling and live[("v1", "Namespace")]
                else {}
            )
            state = desired.load_project(project_id, allocated, products=products, orders=orders)
            try:
                result.changes += applier.sync(render_project(state.spec), live)
            except ApplyError as exc:
                provisioning.settle()
                log.error("project %s: %s", project_id, exc)
                # Step 2, refused (one transaction): open orders failed, subscriptions say why.
                store.store_outcome(
                    project_outcome(
                        Step.FAILED,
                        orders=state.open_orders,
                        subscriptions=state.subscriptions,
                        failure=(exc.reason, exc.message),
                    )
                )
                raise
        finally:
            provisioning.settle()  # what it stored (if anything) comes before what follows
        # Step 2 (one transaction): the cluster matches the database; orders move on.
        outcome = project_outcome(
            Step.APPLIED,
            orders=state.open_orders,
            subscriptions=state.subscriptions,
            suspended=state.suspended,
            waiting=state.waiting_cancels,
        )
        store.store_outcome(outcome)
        result.orders = {o.order_id: o.state for o in outcome.orders if o.state}
    result.calls = applier.calls - before
    result.seconds = time.perf_counter() - began
    result.api_seconds = applier.api_seconds - api_before
    if result.changes:
        log.info(
            "project %s: %s (%.0f ms, of which API requests %.0f ms)",
            project_id, ", ".join(result.changes), 1000 * result.seconds,
            1000 * result.api_seconds,
        )  # fmt: skip
    return result


@dataclass(frozen=True)
class LiveSnapshot:
    """The managed objects of every namespace, read with one LIST per kind (the resync's view)."""

    namespaces: dict[str, dict[str, Any]]
    by_kind: dict[tuple[str, str], dict[str, dict[str, dict[str, Any]]]]  # kind -> ns -> name

    @classmethod
    def read(cls, applier: Applier) -> LiveSnapshot:
        """One LIST of managed namespaces and one per namespaced managed kind, cluster-wide."""
        return cls(
            applier.list_managed("v1", "Namespace"),
            {kind: applier.list_managed_everywhere(*kind) for kind in NAMESPACED_MANAGED},
        )

    def project(self, namespace: str) -> dict[tuple[str, str], dict[str, dict[str, Any]]]:
        """What `_live_project` would read for this namespace, taken from the snapshot."""
        ns = self.namespaces.get(namespace)
        if ns is None:
            return {("v1", "Namespace"): {}}
        live = {("v1", "Namespace"): {namespace: ns}}
        for kind in NAMESPACED_MANAGED:
            live[kind] = self.by_kind[kind].get(namespace, {})
        return live


def is_settled(state: desired.ProjectState, live: dict[tuple[str, str], dict]) -> bool:
    """True if a reconcile of this project would write nothing, as far as `state` and `live`
    show: no open order, every desired object current, nothing to prune, and the subscriptions'
    conditions already stored (pure: no call, no query)."""
    if state.open_orders or not live[("v1", "Namespace")]:
        return False
    to_apply, to_delete = plan(render_project(state.spec), live)
    if to_apply or to_delete:
        return False
    outcome = project_outcome(
        Step.APPLIED, orders=(), subscriptions=state.subscriptions, suspended=state.suspended
    )
    return store.changes_nothing(outcome, {s.id: s.conditions for s in state.subscriptions})


def resync_project(
    state: desired.ProjectState, live: dict[tuple[str, str], dict], applier: Applier
) -> ReconcileResult | None:
    """One project of the resync, given snapshots of its rows (`state`) and live objects.

    Settled by the snapshots (`is_settled`): nothing is done, no call, no query, no lock (it
    writes nothing to guard). Otherwise `reconcile_project` runs: under the project's lock, with
    fresh reads of its namespace and rows, so a write never rests on the snapshots, which are
    older than the lock: a per-order reconcile that ran after they were taken is never undone
    or downgraded. None if the project was deleted meanwhile."""
    if is_settled(state, live):
        return ReconcileResult(state.spec.project_id)
    try:
        return reconcile_project(state.spec.project_id, applier, platform_cached=True)
    except desired.ProjectGone:
        log.info("project %s was deleted during the resync", state.spec.project_id)
        return None


def resync_all(applier: Applier | None = None) -> list[ReconcileResult]:
    """Check the platform and every project against the live cluster; idempotent.

    The reads are shared, so their number does not grow with the projects: one LIST per managed
    kind across all namespaces (`LiveSnapshot`) and the desired state of every project in a
    constant number of queries (`desired.load_projects`); then `resync_project` for each, which
    costs nothing more where the snapshots show nothing to write."""
    applier = applier or Applier(shared_api_client())
    products = desired.platform_products()
    sync_platform(applier, prune=True, products=products)
    snapshot = LiveSnapshot.read(applier)
    results = []
    for state in desired.load_projects(products).values():
        result = resync_project(state, snapshot.project(state.spec.namespace), applier)
        if result is not None:
            results.append(result)
    return results
