"""The controller's one reader of portal state: the database (the truth) into the frozen specs
the renderers take, and the few facts the watcher and the tasks ask of it.

Read-only; its twin `controller.store` is the one writer, and no other controller module imports
`portal`. `load_project` reads one project (a handful of queries); `load_projects` reads every
project in a constant number of queries (the periodic resync); both build the same `ProjectState`
through `project_state`. Settings (`portal/settings.py`, each set by a TRANCHE_* variable the
chart fills): CONTROLLER_POD_QUOTA, CONTROLLER_DEFAULT_MEMORY_REQUEST_MIB,
CONTROLLER_DEFAULT_MEMORY_LIMIT_MIB, CONTROLLER_DEFAULT_CPU_REQUEST_MILLICORES,
CONTROLLER_CANCEL_GRACE_SECONDS, CONTROLLER_PLATFORM_USERS, TENANT_INGRESS_NAMESPACES,
ALLOW_NODE_PORT_SERVICES.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from controller.access import Member, accounts
from controller.conditions import OpenOrder, SubscriptionState
from controller.render.spec import Entitlement, PlanLimits, ProjectSpec
from portal.access.models import ClusterAccess
from portal.agents.gpu_service import InMaintenance, in_maintenance
from portal.catalog.models import Product
from portal.cluster.models import MeteringCheckpoint
from portal.orders.models import Order, Subscription
from portal.tenants.models import Membership, Project
from tranche.orders import CANCEL, CANCELLING, OPEN_ORDER_STATES
from tranche.products import ProductSpec

ProjectGone = Project.DoesNotExist  # the project was deleted (a message about it is moot)


def cancel_grace() -> timedelta:
    """How long a cancel waits for allocated claims before removing the class's template."""
    return timedelta(seconds=settings.CONTROLLER_CANCEL_GRACE_SECONDS)


def platform_products() -> list[ProductSpec]:
    """Products that need a DeviceClass: sellable ones, and any still held by a project."""
    held = Subscription.objects.filter(quantity__gt=0).values("product_id")
    products = Product.objects.filter(Q(sellable=True) | Q(pk__in=held)).select_related("gpu_model")
    return [p.spec() for p in products]


def node_ports_allowed() -> bool:
    """Whether tenants may make NodePort and LoadBalancer Services (the service policy)."""
    return bool(settings.ALLOW_NODE_PORT_SERVICES)


def platform_users() -> tuple[str, ...]:
    """Usernames policy 4 treats as the platform (the controller's own identity in production)."""
    return tuple(settings.CONTROLLER_PLATFORM_USERS)


@dataclass(frozen=True)
class ProjectState:
    """The desired spec of a project plus what the reconcile must report back."""

    spec: ProjectSpec
    suspended: bool
    subscribed: dict[str, int]  # class -> entitled quantity in the database
    open_orders: tuple[OpenOrder, ...]
    waiting_cancels: dict[str, str]  # class -> why its template is still kept
    subscriptions: tuple[SubscriptionState, ...] = ()


def open_orders(project_id: int) -> tuple[OpenOrder, ...]:
    """Open orders of a project, oldest first."""
    rows = (
        Order.objects.filter(project_id=project_id, state__in=OPEN_ORDER_STATES)
        .select_related("product")
        .order_by("created_at", "id")
    )
    return tuple(_open_order(o) for o in rows)


def _open_order(o: Order) -> OpenOrder:
    return OpenOrder(o.pk, o.kind, o.state, o.product.device_class, o.quantity, o.created_at)


def members_by_organization(
    organization_ids: Iterable[int] | None = None,
) -> dict[int, list[Member]]:
    """Active members of the given organizations (all if None), by username; two queries."""
    memberships = Membership.objects.filter(user__is_active=True)
    if organization_ids is not None:
        memberships = memberships.filter(organization_id__in=list(organization_ids))
    rows = memberships.order_by("user__username").values_list(
        "organization_id", "user__username", "user_id", "role"
    )
    generations = dict(
        ClusterAccess.objects.filter(user_id__in=memberships.values("user_id")).values_list(
            "user_id", "generation"
        )
    )
    members: dict[int, list[Member]] = {}
    for org, username, user_id, role in rows:
        members.setdefault(org, []).append(
            Member(username, user_id, role, generations.get(user_id, 1))
        )
    return members


def project_namespace(project_id: int) -> str:
    """The project's namespace; raises `ProjectGone` once it is deleted."""
    return Project.objects.values_list("namespace", flat=True).get(pk=project_id)


def project_namespaces() -> dict[str, int]:
    """Namespace -> project id of every project (the watcher's map of tenant namespaces)."""
    return dict(Project.objects.values_list("namespace", "pk"))


def namespace_in_use(namespace: str) -> bool:
    """Whether a project still names the namespace (retiring it would delete its workloads)."""
    return Project.objects.filter(namespace=namespace).exists()


def cancel_waits(project_id: int) -> bool:
    """Whether a cancel of the project waits for its claims to go (a released claim ends it)."""
    return Order.objects.filter(project_id=project_id, state=CANCELLING).exists()


def gpus_in_maintenance() -> list[InMaintenance]:
    """GPUs support marked out for maintenance (their newest mark), by node and GPU."""
    return in_maintenance()


def claims_checkpoint() -> str | None:
    """The claims resourceVersion the ledger last followed (None: never)."""
    return (
        MeteringCheckpoint.objects.filter(stream="claims")
        .values_list("resource_version", flat=True)
        .first()
    )


def subscription_states(project_id: int) -> tuple[SubscriptionState, ...]:
    """The project's subscriptions with their stored conditions (what an outcome compares)."""
    rows = (
        Subscription.objects.filter(project_id=project_id)
        .order_by("pk")
        .values_list("pk", "product__device_class", "quantity", "version", "conditions")
    )
    return tuple(
        SubscriptionState(pk, cls, qty, version, tuple(conditions or ()))
        for pk, cls, qty, version, conditions in rows
    )


def plan_limits(project: Project) -> PlanLimits:
    return PlanLimits(
        cpu_millicores=project.cpu_quota_millicores,
        memory_mib=project.memory_quota_mib,
        pods=settings.CONTROLLER_POD_QUOTA,
        default_memory_request_mib=settings.CONTROLLER_DEFAULT_MEMORY_REQUEST_MIB,
        default_memory_limit_mib=settings.CONTROLLER_DEFAULT_MEMORY_LIMIT_MIB,
        default_cpu_request_millicores=settings.CONTROLLER_DEFAULT_CPU_REQUEST_MILLICORES,
    )


def load_project(
    project_id: int,
    allocated: dict[str, int] | None = None,
    now: datetime | None = None,
    products: list[ProductSpec] | None = None,
    orders: tuple[OpenOrder, ...] | None = None,
) -> ProjectState:
    """Desired state of a project. `allocated` (class -> claims) decides cancel grace periods;
    `products` and `orders` (`open_orders`) if the caller has read them already."""
    project = Project.objects.select_related("organization").get(pk=project_id)
    subs = Subscription.objects.filter(project_id=project_id).select_related("product__gpu_model")
    return project_state(
        project,
        subs=list(subs),
        orders=open_orders(project_id) if orders is None else orders,
        members=members_by_organization([project.organization_id]).get(project.organization_id, []),
        products=products if products is not None else platform_products(),
        allocated=allocated,
        now=now,
    )


def load_projects(
    products: list[ProductSpec], now: datetime | None = None
) -> dict[int, ProjectState]:
    """Desired state of EVERY project, by id, in five queries whatever their number (the resync).

    No claims are counted: a project with an open cancel needs them, and the resync reconciles
    such a project on its own (`reconcile_project`), which reads them."""
    subs: dict[int, list[Subscription]] = {}
    for sub in Subscription.objects.select_related("product__gpu_model"):
        subs.setdefault(sub.project_id, []).append(sub)
    orders: dict[int, list[OpenOrder]] = {}
    rows = (
        Order.objects.filter(state__in=OPEN_ORDER_STATES)
        .select_related("product")
        .order_by("created_at", "id")
    )
    for o in rows:
        orders.setdefault(o.project_id, []).append(_open_order(o))
    members = members_by_organization()
    return {
        project.pk: project_state(
            project,
            subs=subs.get(project.pk, []),
            orders=tuple(orders.get(project.pk, ())),
            members=members.get(project.organization_id, []),
            products=products,
            now=now,
        )
        for project in Project.objects.select_related("organization").order_by("pk")
    }


def project_state(
    project: Project,
    *,
    subs: list[Subscription],
    orders: tuple[OpenOrder, ...],
    members: list[Member],
    products: list[ProductSpec],
    allocated: dict[str, int] | None = None,
    now: datetime | None = None,
) -> ProjectState:
    """The desired state from a project's rows (no query: they are read by the caller).

    Suspension sets every quantity to 0 (new claims refused by quota) but keeps templates and
    entitlements, so running pods and their claims are untouched and resuming restores quotas.
    """
    now = now or timezone.now()
    allocated = allocated or {}
    suspended = project.organization.is_suspended
    first_cancel: dict[str, datetime] = {}
    for o in orders:
        if o.kind == CANCEL:
            first_cancel.setdefault(o.device_class, o.created_at)
    entitlements, waiting = [], {}
    subscribed = {}
    for sub in sorted(subs, key=lambda s: s.product.device_class):
        cls = sub.product.device_class
        subscribed[cls] = sub.quantity
        keep = sub.quantity > 0
        if not keep and cls in first_cancel and allocated.get(cls, 0) > 0:
            deadline = first_cancel[cls] + cancel_grace()
            keep = now < deadline
            if keep:
                waiting[cls] = (
                    f"{allocated[cls]} slice(s) of {cls} are still allocated; the claim "
                    f"template stays until they are released or the grace period ends at "
                    f"{deadline:%Y-%m-%d %H:%M} UTC. New claims are already refused. The "
                    f"cancel completes within seconds of the last pod going; at "
                    f"{deadline:%H:%M} UTC at the latest the template and the {cls} quota are "
                    f"removed: pods still running keep their slice until they exit, and no "
                    f"new pod can get one."
                )
        if keep:
            qty = 0 if suspended else sub.quantity
            entitlements.append(Entitlement(sub.product.spec(), qty, template=True))
    spec = ProjectSpec(
        project_id=project.pk,
        namespace=project.namespace,
        organization=project.organization.slug,
        project=project.slug,
        entitlements=tuple(entitlements),
        limits=plan_limits(project),
        all_products=tuple(products),
        accounts=accounts(members, suspended),
        ingress_namespaces=tuple(settings.TENANT_INGRESS_NAMESPACES),
    )
    states = tuple(
        SubscriptionState(
            s.pk, s.product.device_class, s.quantity, s.version, tuple(s.conditions or ())
        )
        for s in sorted(subs, key=lambda s: s.pk)
    )
    return ProjectState(spec, suspended, subscribed, orders, waiting, states)
