"""Leader election on a coordination.k8s.io Lease: of the watcher's (or beat's) replicas one runs,
the others wait, so a drained or failed node does not stop them for the eviction's 5 minutes.

The Lease lives in the process's namespace (`tranche-system` in the chart) under the name the
caller gives (`tranche-watcher`, `tranche-beat`). Every write is a compare-and-swap on the
Lease's resourceVersion, so two candidates never both believe they won.

Figures (chosen for the 15 s takeover the chart promises, see docs/install.md "Leader election"):
  LEASE_SECONDS = 8    a holder that has not renewed for this long has lost it; a candidate
                       takes it over 8 s after it last saw the record change
  RENEW_SECONDS = 2    the holder renews 4 times per lease: one slow API answer is not a loss
  RETRY_SECONDS = 1    how often a candidate looks at the Lease
Expiry is judged on the candidate's own monotonic clock from when it last saw the record change
(as client-go does), never by comparing the holder's renewTime with local time: the nodes'
clocks need not agree. A holder that stops cleanly (SIGTERM: pod deleted, rolled, drained) gives
the Lease up at once, so its successor starts within RETRY_SECONDS; a killed one is replaced
after LEASE_SECONDS. A holder that cannot renew for LEASE_SECONDS stops itself (`on_lost`):
it may already have a successor.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.rest import ApiException

log = logging.getLogger("controller.leader")
LEASE_SECONDS = 8
RENEW_SECONDS = 2.0
RETRY_SECONDS = 1.0
IN_CLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def identity() -> str:
    """Who holds the Lease: the pod's name (the chart's POD_NAME, else the host) and this
    process, `<pod>_<8 hex>`. Per process, as client-go's: a leader whose container the kubelet
    restarts after a crash is a new holder and waits for the dead one's Lease to expire like
    any standby, instead of renewing a Lease it never gave up (and beating the standby to it)."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def own_namespace() -> str:
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open(IN_CLUSTER_NAMESPACE) as f:
            return f.read().strip()
    except OSError:
        return "tranche-system"


def _now() -> datetime:
    return datetime.now(UTC)


class LeaseElector:
    """Campaign for one Lease, then keep it; `acquire()` blocks until held or `stop` is set."""

    def __init__(
        self, api: client.ApiClient, name: str, namespace: str | None = None, who: str = ""
    ) -> None:
        self.coord = client.CoordinationV1Api(api)
        self.name, self.namespace = name, namespace or own_namespace()
        self.who = who or identity()
        self.stop = threading.Event()
        self._seen: tuple[str, float] = ("", 0.0)  # (resourceVersion, monotonic when first seen)
        self.held_since = 0.0

    # --- one attempt -------------------------------------------------------------------------
    def _body(self, rv: str | None, transitions: int, acquired: datetime | None) -> client.V1Lease:
        now = _now()
        return client.V1Lease(
            api_version="coordination.k8s.io/v1",
            kind="Lease",
            metadata=client.V1ObjectMeta(
                name=self.name, namespace=self.namespace, resource_version=rv or None
            ),
            spec=client.V1LeaseSpec(
                holder_identity=self.who,
                lease_duration_seconds=LEASE_SECONDS,
                acquire_time=acquired or now,
                renew_time=now,
                lease_transitions=transitions,
            ),
        )

    def try_acquire_or_renew(self) -> bool:
        """One look at the Lease; True when this process holds it afterwards."""
        try:
            lease = self.coord.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            try:
                self.coord.create_namespaced_lease(self.namespace, self._body(None, 0, None))
            except ApiException as created:
                if created.status == 409:  # another candidate created it first
                    return False
                raise
            return True
        spec = lease.spec or client.V1LeaseSpec()
        rv = (lease.metadata or client.V1ObjectMeta()).resource_version or ""
        if rv != self._seen[0]:
            self._seen = (rv, time.monotonic())
        holder = spec.holder_identity or ""
        mine = holder == self.who
        expired = time.monotonic() - self._seen[1] >= (spec.lease_duration_seconds or 0)
        if holder and not mine and not expired:
            return False
        transitions = (spec.lease_transitions or 0) + (0 if mine else 1)
        acquired = spec.acquire_time if mine else None
        try:
            done = self.coord.replace_namespaced_lease(
                self.name, self.namespace, self._body(rv, transitions, acquired)
            )
        except ApiException as exc:
            if exc.status == 409:  # changed since we read it: someone else renewed or won
                return False
            raise
        renewed = (done.metadata or client.V1ObjectMeta()).resource_version or ""
        self._seen = (renewed, time.monotonic())
        return True

    # --- the loops ---------------------------------------------------------------------------
    def acquire(self) -> bool:
        """Wait until this process holds the Lease (True) or `stop` is set (False)."""
        while not self.stop.is_set():
            try:
                if self.try_acquire_or_renew():
                    self.held_since = time.monotonic()
                    log.info("holding Lease %s/%s as %s", self.namespace, self.name, self.who)
                    return True
            except (ApiException, OSError) as exc:  # API down: keep campaigning
                log.warning("Lease %s: %s", self.name, exc)
            self.stop.wait(RETRY_SECONDS)
        return False

    def keep(self, on_lost: Callable[[], None]) -> threading.Thread:
        """Renew every RENEW_SECONDS in a daemon thread; `on_lost()` once the Lease is gone (taken,
        or not renewed for LEASE_SECONDS). Ends quietly when `stop` is set."""

        def renew() -> None:
            last = time.monotonic()
            while not self.stop.wait(RENEW_SECONDS):
                try:
                    if self.try_acquire_or_renew():
                        last = time.monotonic()
                        continue
                    log.error("Lease %s taken by another holder", self.name)
                except (ApiException, OSError) as exc:
                    log.warning("Lease %s not renewed: %s", self.name, exc)
                    if time.monotonic() - last < LEASE_SECONDS:
                        continue
                if not self.stop.is_set():
                    on_lost()
                return

        thread = threading.Thread(target=renew, name=f"lease-{self.name}", daemon=True)
        thread.start()
        return thread

    def release(self) -> None:
        """Give the Lease up (clean stop): a successor need not wait for it to expire."""
        self.stop.set()
        try:
            lease = self.coord.read_namespaced_lease(self.name, self.namespace)
            spec = lease.spec
            if spec is None or spec.holder_identity != self.who:
                return
            spec.holder_identity = None
            spec.lease_duration_seconds = 1
            spec.renew_time = _now()
            self.coord.replace_namespaced_lease(self.name, self.namespace, lease)
            log.info("released Lease %s/%s", self.namespace, self.name)
        except (ApiException, OSError) as exc:  # it expires on its own
            log.warning("Lease %s not released: %s", self.name, exc)


def lost_leadership() -> None:
    """What a holder does when its Lease is gone: stop the process at once (the kubelet restarts
    it, and it campaigns again), because a successor may already be running."""
    log.error("Lease lost: exiting so that only the new holder runs")
    logging.shutdown()
    os._exit(1)
