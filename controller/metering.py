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
from datetime import UTC, datetime
from typing import Any

from controller import desired, store
from controller.apply import Applier
from controller.observe import observed_claim
from tranche.observed import ClaimEvent

log = logging.getLogger(__name__)
CLAIMS_PATH = "/apis/resource.k8s.io/v1/resourceclaims"


def meter_claim_event(kind: str, claim: dict[str, Any], replaying: bool = False) -> None:
    """Open or close the claim's usage record (idempotent), then remember the event's version
    as the ledger's checkpoint; never raises."""
    version = (claim.get("metadata") or {}).get("resourceVersion", "")
    fact = observed_claim(claim)
    try:
        store.record_claim_event(ClaimEvent(kind, fact, version), replaying=replaying)
    except Exception:  # the database may be restarting: the next resync repairs the ledger
        log.exception("ledger: could not record %s of claim %s/%s", kind, fact.namespace, fact.name)
    finally:
        store.release_connection()


def meter_claims_listed(
    claims: list[dict[str, Any]], listed_at: datetime, resource_version: str | None = None
) -> None:
    """Reconcile the ledger with a full LIST of claims sent at `listed_at` (at
    `resource_version`, then the ledger's checkpoint); never raises."""
    try:
        store.resync_claims(map(observed_claim, claims), listed_at, resource_version or "")
    except Exception:
        log.exception("ledger: resync from %d listed claims failed", len(claims))
    finally:
        store.release_connection()


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
