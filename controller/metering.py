"""Feed the claim ledger from the cluster: one call per claim event, one resync from a LIST.

Kept apart from the watcher's stream/fold code so the watcher only calls `meter_claim_event`
for each claim event and `meter_claims_listed` after each relist of claims; the periodic resync
(`controller.tasks.resync`) calls `resync_ledger`. Claims are read into `tranche.observed` facts
here (`controller.observe`) and written through `controller.store`. Ledger writes never stop the
watcher: a failed write is logged and the next resync (which compares the ledger with the
cluster) repairs it.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from typing import Any

from controller import desired, store
from controller.apply import Applier
from controller.observe import observed_claim
from tranche.observed import ClaimEvent

log = logging.getLogger(__name__)
CLAIMS_PATH = "/apis/resource.k8s.io/v1/resourceclaims"


class ClaimsCheckpoint:
    """The claims resourceVersion the ledger has followed, kept by the watcher and saved by its
    flusher (`save`, at most once a flush) rather than with every event, which would make it
    the watcher's most frequent write. A checkpoint behind by a flush costs a
    restarted watcher a replay of events the ledger already holds, and folding one again
    changes nothing (`portal.cluster.ledger` is idempotent)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._followed = ""
        self._saved = ""

    def advance(self, resource_version: str) -> None:
        """The ledger holds every claim change up to `resource_version` (one stream's order)."""
        if resource_version:
            with self._lock:
                self._followed = resource_version

    def save(self) -> bool:
        """Store the version followed if it moved since the last save; never raises (kept for
        the next save). Returns whether it stored one."""
        with self._lock:
            version = self._followed
        if not version or version == self._saved:
            return False
        try:  # on the flusher's own connection, which it keeps between flushes
            store.save_claims_checkpoint(version)
        except Exception:  # the database may be restarting: the next flush saves it
            log.exception("ledger: could not save the claims checkpoint %s", version)
            store.release_connection()
            return False
        self._saved = version
        return True


def meter_claim_event(
    kind: str,
    claim: dict[str, Any],
    checkpoint: ClaimsCheckpoint | None = None,
    replaying: bool = False,
) -> None:
    """Open or close the claim's usage record (idempotent); once it is recorded, the event's
    version advances `checkpoint`. Never raises."""
    version = (claim.get("metadata") or {}).get("resourceVersion", "")
    fact = observed_claim(claim)
    try:
        store.record_claim_event(ClaimEvent(kind, fact), replaying=replaying)
    except Exception:  # the database may be restarting: the next resync repairs the ledger
        log.exception("ledger: could not record %s of claim %s/%s", kind, fact.namespace, fact.name)
        return
    finally:
        store.release_connection()
    if checkpoint is not None:
        checkpoint.advance(version)


def meter_claims_listed(
    claims: list[dict[str, Any]],
    listed_at: datetime,
    resource_version: str = "",
    checkpoint: ClaimsCheckpoint | None = None,
) -> None:
    """Reconcile the ledger with a full LIST of claims sent at `listed_at` (at
    `resource_version`: it then advances `checkpoint`); never raises."""
    try:
        store.resync_claims(map(observed_claim, claims), listed_at)
    except Exception:
        log.exception("ledger: resync from %d listed claims failed", len(claims))
        return
    finally:
        store.release_connection()
    if checkpoint is not None:
        checkpoint.advance(resource_version)


def claims_checkpoint() -> str | None:
    """The claims resourceVersion the ledger last followed (None: never, or unreadable)."""
    try:
        return desired.claims_checkpoint()
    except Exception:
        log.exception("ledger: could not read the claims checkpoint")
        return None
    finally:
        store.release_connection()


def resync_ledger(applier: Applier) -> dict[str, int]:
    """LIST every claim (one call) and reconcile the ledger with it (the periodic resync)."""
    listed_at = datetime.now(UTC)
    claims = applier.list_path(CLAIMS_PATH)
    return store.resync_claims(map(observed_claim, claims), listed_at)
