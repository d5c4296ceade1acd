"""Fleet-sized rows for a page benchmark's own database (bench/load.py), written in bulk.

The shape of issue #18's fleet: `orgs` organizations with one project each, `pods_per_project`
pods per project (500 x 8 = 4,000 claims/pods), and for each pod its latest agent report
(PodSliceStatus), the cluster's view (PodState), per-minute history (PodMinute: a full 24 h for
the measured project, `history_minutes` for the others), an allocation in the usage ledger, plus
subscriptions, usage, orders with their history and audit entries per project. The rows are
inserted directly (bulk_create and INSERT ... SELECT generate_series), not through the services:
the pages read them, and the bench measures the pages, not the seeding.

`seed_fleet` returns a `SeededFleet`: the login and project the bench measures, a node token
and a pod of that project bound to that node (the watcher's Redis hash written as it would be),
so `bench.scalekit.pages.measure_fanout` is accepted.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

GIB = 1024**3


@dataclass(frozen=True)
class SeededFleet:
    username: str
    password: str
    project_id: int
    namespace: str
    node: str
    node_token: str
    pod: tuple[str, str, str]  # (namespace, pod name, uid) bound to `node`
    projects: int
    pods: int
    # the other nodes: node -> (token, its pods), for `agent_load.AgentLoad`
    agents: dict[str, tuple[str, list[tuple[str, str, str]]]]


def _projects(tag: str, orgs: int, owner_project) -> list:
    from django.contrib.auth import get_user_model

    from portal.cluster.models import QuotaUse
    from portal.tenants.models import Membership, Organization, Project

    user_model = get_user_model()
    new_orgs = Organization.objects.bulk_create(
        Organization(name=f"fleet {tag} {i:04d}", slug=f"f{tag}-{i:04d}") for i in range(orgs - 1)
    )
    users = user_model.objects.bulk_create(
        # "!" is Django's unusable password: these owners never log in
        user_model(username=f"f{tag}-{i:04d}", password="!")  # noqa: S106
        for i in range(orgs - 1)
    )
    Membership.objects.bulk_create(
        Membership(user=u, organization=o, role=Membership.Role.OWNER)
        for u, o in zip(users, new_orgs, strict=True)
    )
    projects = Project.objects.bulk_create(
        Project(
            organization=o,
            name="ml",
            slug="ml",
            namespace=f"f{tag}-{i:04d}-ml",
        )
        for i, o in enumerate(new_orgs)
    )
    QuotaUse.objects.bulk_create(
        QuotaUse(project=p, cpu_used_millicores=4000, memory_used_mib=16384) for p in projects
    )
    return [owner_project, *projects]


def _orders(projects: list, products: list, pods_per_project: int, owner) -> None:
    from django.utils import timezone

    from portal.audit.models import AuditLog
    from portal.cluster.models import ProjectUsage, UsageRecord
    from portal.orders.models import Order, OrderEvent, Subscription

    now = timezone.now()
    subs = Subscription.objects.bulk_create(
        Subscription(
            project=p,
            product=products[k],
            quantity=pods_per_project // 2,
            version=1,
            conditions=[{"type": "Ready", "status": "True", "message": ""}],
        )
        for p in projects
        for k in range(2)
    )
    ProjectUsage.objects.bulk_create(
        ProjectUsage(project=s.project, product=s.product, allocated=s.quantity, pending=0)
        for s in subs
    )
    orders = Order.objects.bulk_create(
        Order(organization_id=s.project.organization_id, project=s.project, product=s.product,
              subscription=s, kind="buy" if n == 0 else "resize", from_quantity=n,
              quantity=n + 1, state="active", idempotency_key=secrets.token_hex(16),
              unit_monthly_price=s.product.monthly_price, monthly_total=Decimal("90.00"),
              prorata_charge=Decimal("1.00"), currency=s.product.currency, placed_by=owner)
        for s in subs
        for n in range(s.quantity)
    )  # fmt: skip
    OrderEvent.objects.bulk_create(
        OrderEvent(order=o, from_state=a, to_state=b, actor_label="bench")
        for o in orders
        for a, b in (("", "pending"), ("pending", "provisioning"), ("provisioning", "active"))
    )
    AuditLog.objects.bulk_create(
        AuditLog(
            actor_label="bench",
            action="order.placed",
            organization_id=o.organization_id,
            object_type="order",
            object_id=str(o.pk),
            object_repr=f"order {o.pk}",
        )
        for o in orders
    )
    UsageRecord.objects.bulk_create(
        UsageRecord(
            claim_uid=f"claim-{s.pk}-{k}",
            claim_name=f"c{k}",
            organization_id=s.project.organization_id,
            project=s.project,
            product=s.product,
            node=f"kwok-gpu-{(s.pk + k) % 125}",
            device="gpu-0",
            allocated_at=now - timedelta(hours=k + 1),
            opened_by="event",
        )
        for s in subs
        for k in range(s.quantity)
    )


def _node_of(tag: str, n: int, k: int, node: str) -> str:
    """Project n's pod k: the measured pod on the fan-out node, the rest 32 to a node."""
    return node if n == 0 and k == 0 else f"load-{tag}-gpu-{(n * 8 + k) // 32 % 125}"


def _pods(projects: list, pods_per_project: int, node: str, tag: str) -> None:
    from django.utils import timezone

    from portal.agents.models import PodSliceStatus
    from portal.cluster.models import PodState

    now = timezone.now()
    statuses, states = [], []
    for n, p in enumerate(projects):
        for k in range(pods_per_project):
            where = _node_of(tag, n, k, node)
            statuses.append(
                PodSliceStatus(
                    project=p,
                    node_name=where,
                    namespace=p.namespace,
                    pod_name=f"train-{k}",
                    pod_uid=f"uid-{p.pk}-{k}",
                    gpu_uuid=f"GPU-{n % 1000:04d}",
                    memory_limit_bytes=8 * GIB,
                    memory_used_bytes=3 * GIB,
                    rejected_allocations=0,
                    compute_target_percent=25,
                    compute_used_percent=20.0,
                    throttled_seconds=0.5,
                    processes=1,
                    reported_at=now,
                )
            )
            states.append(
                PodState(
                    project=p,
                    namespace=p.namespace,
                    name=f"train-{k}",
                    phase="Running",
                    reason="running",
                    words="Running on its GPU slice.",
                    events=[[now.isoformat(), "Pulled", "image pulled"]],
                )
            )
    PodSliceStatus.objects.bulk_create(statuses, batch_size=2000)
    PodState.objects.bulk_create(states, batch_size=2000)


_HISTORY = """
INSERT INTO agents_podminute (project_id, namespace, pod_name, minute, memory_used_max_bytes,
    memory_limit_bytes, compute_used_sum, compute_target_percent, samples)
SELECT s.project_id, s.namespace, s.pod_name,
       date_trunc('minute', now()) - make_interval(mins => m.i),
       (2 + (m.i %% 7))::bigint * 1073741824, s.memory_limit_bytes, 6 * (10 + m.i %% 50), 25, 6
FROM agents_podslicestatus s
CROSS JOIN generate_series(0, %s - 1) AS m(i)
WHERE s.project_id = ANY(%s)
ON CONFLICT DO NOTHING
"""


def _history(project_ids: list[int], minutes: int) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(_HISTORY, [minutes, project_ids])


def seed_fleet(
    orgs: int = 500, pods_per_project: int = 8, history_minutes: int = 60
) -> SeededFleet:
    """Write the fleet's rows (see the module docstring); returns what the bench needs."""
    from django.db import connection, transaction

    from portal.agents.services import issue_node_token
    from portal.catalog.seed import ensure_catalogue
    from portal.cluster.bindings import write_pod_states
    from portal.tenants.services import sign_up
    from tranche.observed import ObservedPod
    from tranche.pod_reasons import PodFacts

    tag = secrets.token_hex(3)
    password = secrets.token_hex(12)
    products = ensure_catalogue()
    owner, _org, project = sign_up(
        username=f"load-{tag}", email=f"load-{tag}@example.test", password=password,
        organization_name=f"load {tag}", project_name="ml",
    )  # fmt: skip
    node = f"load-node-{tag}"
    with transaction.atomic():
        projects = _projects(tag, orgs, project)
        _orders(projects, products, pods_per_project, owner)
        _pods(projects, pods_per_project, node, tag)
    _history([project.pk], 24 * 60)
    _history([p.pk for p in projects[1:]], history_minutes)
    pod = (project.namespace, "train-0", f"uid-{project.pk}-0")
    agents: dict[str, tuple[str, list]] = {}
    for n, p in enumerate(projects):  # play the watcher: every pod bound to its node
        bound = []
        for k in range(pods_per_project):
            where, name, uid = _node_of(tag, n, k, node), f"train-{k}", f"uid-{p.pk}-{k}"
            bound.append(ObservedPod(PodFacts(name, phase="Running"), node=where, uid=uid))
            if where != node:
                agents.setdefault(where, ("", []))[1].append((p.namespace, name, uid))
        write_pod_states(p.pk, bound)
    agents = {name: (issue_node_token(name), pods) for name, (_, pods) in agents.items()}
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # as autovacuum would have by the time a fleet is this big
    return SeededFleet(
        username=owner.username, password=password, project_id=project.pk,
        namespace=project.namespace, node=node, node_token=issue_node_token(node), pod=pod,
        projects=len(projects), pods=len(projects) * pods_per_project, agents=agents,
    )  # fmt: skip
