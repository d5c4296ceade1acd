"""A purchase's reconcile writes the database in one transaction (the outcome once applied, with
its history and audit rows) when the apply is quick, and marks the order provisioning first only
when the apply takes longer than the delay; a no-op resync writes in none."""

from __future__ import annotations

from controller.reconcile import reconcile_project
from portal.audit.models import AuditLog
from portal.orders.models import Order
from tests.helpers.transactions import counting_write_transactions

CLASS = "tranche-v100-8g"


def _history(order: Order) -> list[str]:
    return [e.to_state for e in order.events.order_by("at", "pk")]


def test_one_quick_purchase_is_one_write_transaction(tenant, applier) -> None:
    order = tenant.order(CLASS, 2)
    with counting_write_transactions() as first:
        result = reconcile_project(tenant.project.pk, applier, provisioning_delay=30)
    assert result.orders == {order.pk: Order.State.ACTIVE}
    order.refresh_from_db()
    assert order.state == Order.State.ACTIVE
    assert first.writes == 1, first.written
    assert _history(order) == ["pending", "active"]
    audited = AuditLog.objects.filter(object_id=str(order.pk), action__startswith="order.")
    assert sorted(audited.values_list("action", flat=True)) == ["order.active", "order.buy"]
    with counting_write_transactions() as again:
        reconcile_project(tenant.project.pk, applier)
    assert again.writes == 0, again.written


def test_a_slow_apply_shows_provisioning_first(tenant, applier) -> None:
    order = tenant.order(CLASS, 1)
    result = reconcile_project(tenant.project.pk, applier, provisioning_delay=0)
    assert result.orders == {order.pk: Order.State.ACTIVE}
    order.refresh_from_db()
    assert _history(order) == ["pending", "provisioning", "active"]
