"""Feed the billing ledger from the cluster: one call per claim event, one resync from a LIST.

Kept apart from the watcher's stream/fold code so the watcher only calls `meter_claim_event`
for each claim event and `meter_claims_listed` after each relist of claims; the periodic resync
(`controller.resync_all`) calls `resync_ledger`. Ledger writes never stop the watcher: a failed
write is logged and the next resync (which compares the ledger with the cluster) repairs it.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from controller.apply import Applier

log = logging.getLogger(__name__)
CLAIMS_PATH = "/apis/resource.k8s.io/v1/resourceclaims"


def meter_claim_event(kind: str, claim: dict[str, Any], replaying: bool = False) -> None:
    """Open or close the claim's usage record (idempotent), then remember the event's version
    as the ledger's checkpoint; never raises."""
    from portal.billing.metering import observe_claim, save_checkpoint

    try:
        observe_claim(kind, claim, replaying=replaying)
        save_checkpoint((claim.get("metadata") or {}).get("resourceVersion", ""))
    except Exception:  # the database may be restarting: the next resync repairs the ledger
        log.exception("ledger: could not record %s of claim %s", kind, _name(claim))
    finally:
        _release_connection()


def meter_claims_listed(
    claims: list[dict[str, Any]], listed_at: datetime, resource_version: str | None = None
) -> None:
    """Reconcile the ledger with a full LIST of claims sent at `listed_at` (at
    `resource_version`, then the ledger's checkpoint); never raises."""
    from portal.billing.metering import resync_claims, save_checkpoint

    try:
        resync_claims(claims, listed_at)
        save_checkpoint(resource_version or "")
    except Exception:
        log.exception("ledger: resync from %d listed claims failed", len(claims))
    finally:
        _release_connection()


def claims_checkpoint() -> str | None:
    """The claims resourceVersion the ledger last followed (None: never, or unreadable)."""
    from portal.billing.metering import load_checkpoint

    try:
        return load_checkpoint()
    except Exception:
        log.exception("ledger: could not read the claims checkpoint")
        return None
    finally:
        _release_connection()


def _release_connection() -> None:
    """Give the calling thread's connection back to the pool.

    The watcher calls these hooks from its stream threads, one per watched kind; Django keeps a
    connection per thread until it is closed, so without this each stream thread would hold one
    of the pool's few connections for good and the writer would starve ("couldn't get a
    connection after 10 s")."""
    from django.db import connection

    connection.close()


def resync_ledger(applier: Applier) -> dict[str, int]:
    """LIST every claim (one call) and reconcile the ledger with it (the periodic resync)."""
    from django.utils import timezone

    from portal.billing.metering import resync_claims

    listed_at = timezone.now()
    return resync_claims(applier.list_path(CLAIMS_PATH), listed_at)


def _name(claim: dict[str, Any]) -> str:
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
