"""What the cluster says, as typed facts: the twin of `tranche.outcome` in the other direction.

`tranche.outcome` carries what the controller decided to the portal; this module carries what
it observed. The controller's one reader of cluster objects (`controller.observe`) builds these
from ResourceClaims, Pods, Events and ResourceQuotas; the portal's room for observed state
(`portal.cluster`) stores them and every page, the agents' ingest and billing read them from
there. Nothing here parses a Kubernetes object, and nothing that stores these parses one either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from tranche.pod_reasons import PodFacts


@dataclass(frozen=True)
class ObservedPod:
    """One pod: the classifier's view of it, and where it is bound (the agents' ingest accepts
    a pod's report only from the node the cluster bound it to)."""

    facts: PodFacts
    reason: str = ""  # why it waits, in Kubernetes' words (scheduler condition or container)
    node: str = ""  # spec.nodeName; "" until scheduled
    uid: str = ""

    @property
    def name(self) -> str:
        return self.facts.name

    @property
    def phase(self) -> str:
        return self.facts.phase


@dataclass(frozen=True)
class Refusal:
    """A workload whose pods could not be created (its latest FailedCreate event)."""

    kind: str
    name: str
    message: str


@dataclass(frozen=True)
class QuotaStatus:
    """The project ResourceQuota's status: what the API server enforces and what is used."""

    hard: Mapping[str, str] = field(default_factory=dict)
    used: Mapping[str, str] | None = None  # None: the quota controller has not counted yet


@dataclass(frozen=True)
class ClassUsage:
    """Slices of one DeviceClass in one namespace: claims allocated, slices waiting, and why."""

    allocated: int = 0
    pending: int = 0
    pending_reason: str = ""


@dataclass(frozen=True)
class NamespaceView:
    """Everything the cluster says about one namespace now (what `record_namespace` stores)."""

    namespace: str
    pods: tuple[ObservedPod, ...] = ()
    refusals: tuple[Refusal, ...] = ()
    quota: QuotaStatus | None = None
    usage: Mapping[str, ClassUsage] = field(default_factory=dict)  # DeviceClass -> usage


@dataclass(frozen=True)
class ObservedClaim:
    """One ResourceClaim as the usage ledger needs it: its lifetime, with the cluster's times.

    `allocated_at` is when `status.allocation` was written (the scheduler's managedFields
    entry, second resolution), `deleted_at` the claim's deletionTimestamp."""

    uid: str
    namespace: str
    name: str
    device_class: str
    allocated: bool
    node: str = ""
    device: str = ""
    allocated_at: datetime | None = None
    deleted_at: datetime | None = None


@dataclass(frozen=True)
class ClaimEvent:
    """One watch event of a claim: ADDED, MODIFIED or DELETED."""

    kind: str
    claim: ObservedClaim


@dataclass(frozen=True)
class PodRunning:
    """A pod with a GPU slice serving since `running_at` (the cluster's time: the last of its
    containers' starts): billing ends the outage of the slice such a pod replaces."""

    namespace: str
    pod: str
    classes: tuple[str, ...]  # its claims' ResourceClaimTemplate names
    created: datetime
    running_at: datetime
