"""The controller's one writer of portal state: reconcile outcomes, observed facts, ledger events.

Every write the controller makes to the database goes through here, each one the portal's own
entry point for it: a reconcile step's outcome (`portal.orders.lifecycle.store_outcome`, one
transaction), what the cluster says about a namespace (`portal.cluster.services.
record_namespace`), a claim's lifetime (`portal.cluster.ledger`), the end of a slice's outage
(`portal.cluster.outages`), the watcher's heartbeat. Its
twin `controller.desired` is the one reader; no other controller module imports `portal`.
Every function is idempotent: storing the same facts again changes nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from django.db import connection

from portal.cluster import ledger, outages
from portal.cluster.services import record_namespace as _record_namespace
from portal.core import heartbeats
from portal.orders import lifecycle
from tranche.observed import ClaimEvent, NamespaceView, ObservedClaim, PodRunning
from tranche.outcome import ProjectOutcome

CLAIMS_STREAM = "claims"
log = logging.getLogger(__name__)


def store_outcome(outcome: ProjectOutcome) -> int:
    """One reconcile step's order transitions and conditions, in one transaction; rows changed."""
    return lifecycle.store_outcome(outcome)


class DeferredOutcome:
    """An outcome stored only if the work it announces is still running after `delay` seconds.

    The reconcile's "provisioning" step: a tenant cannot see a state that lasts 40 ms, so it is
    written (by a thread, on its own connection) only when the apply takes longer than `delay`;
    otherwise the one outcome after the apply is the reconcile's only write transaction.
    `compute` builds the outcome when it is due (its reads happen only then). `settle()` stops
    a store not yet due and waits for one under way, so the outcome after it is always later."""

    def __init__(self, compute: Callable[[], ProjectOutcome], delay: float) -> None:
        self._compute = compute
        self._settled = threading.Event()
        self.stored = False
        self._thread = threading.Thread(
            target=self._run, args=(delay,), name="deferred-outcome", daemon=True
        )
        self._thread.start()

    def _run(self, delay: float) -> None:
        if self._settled.wait(delay):
            return
        try:
            store_outcome(self._compute())
            self.stored = True
        except Exception:  # the outcome after the apply (or the next reconcile) says it all
            log.exception("could not store the deferred outcome")
        finally:
            connection.close()  # this thread's own connection

    def settle(self) -> bool:
        """Nothing more will be stored by this; returns whether it was."""
        self._settled.set()
        self._thread.join()
        return self.stored


def changes_nothing(outcome: ProjectOutcome, stored: dict[int, tuple[dict[str, Any], ...]]) -> bool:
    """Whether `store_outcome(outcome)` would write nothing (pure: no query)."""
    return lifecycle.changes_nothing(outcome, stored)


def record_namespace(view: NamespaceView) -> bool:
    """What the cluster says about one namespace now; False if no project has the namespace."""
    return _record_namespace(view)


def record_pod_running(fact: PodRunning) -> None:
    """End the outage of the slice a running replacement pod serves again (idempotent)."""
    outages.observe_running(
        fact.namespace, fact.pod, list(fact.classes), fact.created, fact.running_at
    )


def record_claim_event(event: ClaimEvent, replaying: bool = False) -> None:
    """Open or close the claim's ledger record."""
    ledger.record_claim(event.kind, event.claim, replaying=replaying)


def resync_claims(claims: Iterable[ObservedClaim], listed_at: datetime) -> dict[str, int]:
    """Make the ledger agree with a full LIST of claims sent at `listed_at`."""
    return ledger.resync_claims(claims, listed_at)


def save_claims_checkpoint(resource_version: str) -> None:
    """Remember the claims resourceVersion the ledger has followed (a started watcher replays
    the history since)."""
    ledger.save_checkpoint(resource_version, CLAIMS_STREAM)


def beat_watcher(process: str) -> None:
    """The watcher is alive (`/readyz` tells a stopped watcher apart)."""
    heartbeats.beat(heartbeats.WATCHER, process)


def release_connection() -> None:
    """Give the calling thread's connection back to the pool.

    The watcher calls these hooks from its stream threads, one per watched kind; Django keeps a
    connection per thread until it is closed, so without this each stream thread would hold one
    of the pool's few connections for good and the writer would starve ("couldn't get a
    connection after 10 s")."""
    connection.close()
