"""A purchase's reconcile writes the database in two transactions (the open buy is provisioning;
the outcome once applied), whatever the number of conditions; a no-op resync in none."""

from __future__ import annotations

from controller.reconcile import reconcile_project
from portal.orders.models import Order
from tests.helpers.transactions import counting_write_transactions

CLASS = "tranche-v100-8g"


def test_one_purchase_is_two_write_transactions(tenant, applier) -> None:
    order = tenant.order(CLASS, 2)
    with counting_write_transactions() as first:
        result = reconcile_project(tenant.project.pk, applier)
    assert result.orders == {order.pk: Order.State.ACTIVE}
    order.refresh_from_db()
    assert order.state == Order.State.ACTIVE
    assert first.writes == 2, first.written
    with counting_write_transactions() as again:
        reconcile_project(tenant.project.pk, applier)
    assert again.writes == 0, again.written
