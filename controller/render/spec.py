"""Plain, frozen inputs of the renderers: what a project bought, independent of Django.

`controller.desired` builds these from the database; the renderers turn them into dicts. Keeping
them here (no Django, no kubernetes) lets golden tests construct them by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

DRIVER = "gpu.tranche.dev"
LABEL_DOMAIN = "tranche.dev"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "tranche"
LABEL_ORGANIZATION = "tranche.dev/organization"
LABEL_PROJECT = "tranche.dev/project"
LABEL_TENANT = "tranche.dev/tenant"
LABEL_COMPONENT = "tranche.dev/component"
ANNOTATION_SPEC_HASH = "tranche.dev/spec-hash"
CLAIM_REQUEST_NAME = "gpu"
ENTITLEMENTS_CONFIGMAP = "tranche-entitlements"
TENANT_ROLE = "tranche-tenant"
# Cluster access (docs/cluster-access.md): read-only rights, and what a suspended organization's
# members keep (read plus delete); the portal's right to mint tokens in project namespaces.
TENANT_VIEW_ROLE = "tranche-tenant-view"
TENANT_SUSPENDED_ROLE = "tranche-tenant-suspended"
PORTAL_TOKENS_ROLE = "tranche-portal-tokens"
PORTAL_SERVICE_ACCOUNT = ("tranche-system", "tranche-portal")
ANNOTATION_PORTAL_USER = "tranche.dev/portal-user"
# The controller's identity when installed with deploy/install (a platform user in policies).
CONTROLLER_SERVICE_ACCOUNT = "system:serviceaccount:tranche-system:tranche-controller"
QUOTA_NAME = "tranche-quota"
LIMIT_RANGE_NAME = "tranche-defaults"


@dataclass(frozen=True)
class ProductSpec:
    """One slice product as Kubernetes sees it."""

    device_class: str
    gpu_name: str
    memory_mib: int
    compute_percent: int


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

    cpu_millicores: int = 8000
    memory_mib: int = 16384
    pods: int = 50
    default_memory_request_mib: int = 2048
    default_memory_limit_mib: int = 4096
    default_cpu_request_millicores: int = 250


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

    @property
    def tenant_group(self) -> str:
        """The group a tenant's identity carries to act in this project's namespace."""
        return f"tranche.dev:tenant:{self.namespace}"


def memory_quantity(memory_mib: int) -> str:
    """Canonical Kubernetes quantity for MiB: whole GiB as `8Gi`, else `<n>Mi`."""
    if memory_mib % 1024 == 0:
        return f"{memory_mib // 1024}Gi"
    return f"{memory_mib}Mi"


def cpu_quantity(millicores: int) -> str:
    """Canonical Kubernetes quantity for CPU: whole cores as `8`, else `<n>m`."""
    if millicores % 1000 == 0:
        return str(millicores // 1000)
    return f"{millicores}m"


class ProjectIdentity(Protocol):
    """What labels and namespaced objects need of a project (ProjectSpec, or the portal's ref)."""

    @property
    def namespace(self) -> str: ...
    @property
    def organization(self) -> str: ...
    @property
    def project(self) -> str: ...


class SliceSize(Protocol):
    """What a claim template needs of a product (ProductSpec, or the portal's)."""

    @property
    def device_class(self) -> str: ...
    @property
    def memory_mib(self) -> int: ...
    @property
    def compute_percent(self) -> int: ...


def project_labels(spec: ProjectIdentity) -> dict[str, str]:
    """Labels on every object Tranche manages in a project namespace (prune selects on them)."""
    return {
        LABEL_ORGANIZATION: spec.organization,
        LABEL_PROJECT: spec.project,
        LABEL_MANAGED_BY: MANAGED_BY,
    }


def platform_labels() -> dict[str, str]:
    """Labels on cluster-scoped objects shared by all projects (classes, policies)."""
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: "platform"}
