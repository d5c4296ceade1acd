"""Plain, frozen inputs of the renderers: what a project bought, independent of Django.

`controller.desired` builds these from the database; the renderers turn them into dicts. Keeping
them here (no Django, no kubernetes) lets golden tests construct them by hand. Names, labels, the
product spec and quantities are the shared ones of `tranche`: renderers import them from there.
"""

from __future__ import annotations

from dataclasses import dataclass

from tranche import quota
from tranche.names import (
    tenant_group,
)
from tranche.products import ProductSpec


@dataclass(frozen=True)
class Entitlement:
    """Slices of one product a project may hold now, and whether its template stays.

    `quantity` is 0 while the organization is suspended or the product is being cancelled;
    `template` stays True during a cancel's grace period so running claims keep their form.
    """

    product: ProductSpec
    quantity: int
    template: bool = True


@dataclass(frozen=True)
class PlanLimits:
    """Non-GPU quota of a project and the container defaults of its LimitRange."""

    cpu_millicores: int = quota.CPU_MILLICORES
    memory_mib: int = quota.MEMORY_MIB
    pods: int = quota.PODS
    default_memory_request_mib: int = quota.DEFAULT_MEMORY_REQUEST_MIB
    default_memory_limit_mib: int = quota.DEFAULT_MEMORY_LIMIT_MIB
    default_cpu_request_millicores: int = quota.DEFAULT_CPU_REQUEST_MILLICORES


@dataclass(frozen=True)
class TenantAccount:
    """A portal user's ServiceAccount in a project namespace and the rights it is bound to.

    `rights` is one of RIGHTS: `edit` (owners, members), `view` (viewers), `suspended` (owners
    and members while their organization is suspended: read, and delete their workloads)."""

    name: str
    person: str
    rights: str


RIGHTS = ("edit", "view", "suspended")


@dataclass(frozen=True)
class ProjectSpec:
    """Everything the per-project renderers need."""

    project_id: int
    namespace: str
    organization: str
    project: str
    entitlements: tuple[Entitlement, ...] = ()
    limits: PlanLimits = PlanLimits()
    # every product a class exists for: unlisted classes get a quota of 0 (defence in depth)
    all_products: tuple[ProductSpec, ...] = ()
    # one per member of the organization (cluster access); empty renders no accounts
    accounts: tuple[TenantAccount, ...] = ()
    # namespaces whose pods may connect to the project's pods besides its own: the platform's
    # ingress controller (TRANCHE_TENANT_INGRESS_NAMESPACES; render/network_policy.py)
    ingress_namespaces: tuple[str, ...] = ()

    @property
    def tenant_group(self) -> str:
        """The group a tenant's identity carries to act in this project's namespace."""
        return tenant_group(self.namespace)
