"""The reconcile backlog as operators and tenants see it: orders placed and not yet active.

Platform-wide on purpose (it feeds `/readyz?scope=controller` and the support console, never a
tenant's page with another tenant's rows): an order `pending` or `provisioning` longer than
PROVISIONING_DELAYED_SECONDS means provisioning is stalled, whatever the cause. A tenant's own
order page says so through `delay_notice`, in words that say what happened and that nothing is
lost.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import Min
from django.utils import timezone

from portal.core.cluster import cluster_answers
from portal.orders.models import Order
from tranche.orders import PENDING, PROVISIONING

WAITING = (PENDING, PROVISIONING)
CLUSTER_DOWN = (
    "Provisioning is delayed: the cluster is not answering; your order is kept and will "
    "complete by itself."
)
SLOW = (
    "Provisioning is delayed: it is taking longer than usual; your order is kept and will "
    "complete by itself."
)


def check_backlog() -> tuple[bool, str]:
    """(ok, message) for readiness: not ok while an order waits longer than the threshold."""
    limit = settings.PROVISIONING_DELAYED_SECONDS
    waiting = Order.objects.filter(state__in=WAITING)
    found = waiting.aggregate(oldest=Min("created_at"))["oldest"]
    if found is None:
        return True, "no order waits to be provisioned"
    age = (timezone.now() - found).total_seconds()
    if age <= limit:
        return True, f"oldest order waiting {age:.0f}s (limit {limit}s)"
    late = waiting.filter(created_at__lt=timezone.now() - timedelta(seconds=limit)).count()
    return False, f"{late} order(s) waiting over {limit}s to be provisioned (oldest {age:.0f}s)"


def delay_notice(order: Order) -> str:
    """What the tenant's order page says about a waiting order, or ""."""
    if order.state not in WAITING:
        return ""
    if not cluster_answers().ok:
        return CLUSTER_DOWN
    age = (timezone.now() - order.created_at).total_seconds()
    return SLOW if age > settings.PROVISIONING_DELAYED_SECONDS else ""
