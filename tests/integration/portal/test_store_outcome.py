"""A reconcile outcome is stored through one entry point in ONE transaction, only what changed."""

from __future__ import annotations

import pytest

from controller import desired
from controller.conditions import Step, project_outcome
from portal.orders import lifecycle
from portal.orders.models import Order, Subscription
from portal.orders.services import place_order
from tests.helpers.transactions import counting_write_transactions
from tranche import orders as o
from tranche.outcome import Condition, OrderOutcome, ProjectOutcome

CLASS = "tranche-v100-8g"


def _buy(world, quantity: int = 2) -> Order:
    order, _ = place_order(
        membership=world.membership(world.owner),
        project=world.project_a,
        product=world.products[CLASS],
        quantity=quantity,
        idempotency_key=f"k{quantity}",
    )
    return order


def _step(project_id: int, step: Step):
    return project_outcome(
        step,
        orders=desired.open_orders(project_id),
        subscriptions=desired.subscription_states(project_id),
    )


def test_a_purchase_is_two_write_transactions_and_a_rerun_writes_nothing(world) -> None:
    order = _buy(world)
    pid = world.project_a.pk
    with counting_write_transactions() as applying:
        lifecycle.store_outcome(_step(pid, Step.APPLYING))
    with counting_write_transactions() as applied:
        written = lifecycle.store_outcome(_step(pid, Step.APPLIED))
    order.refresh_from_db()
    assert order.state == o.ACTIVE
    assert [e.to_state for e in order.events.order_by("id")] == [
        "pending",
        "provisioning",
        "active",
    ]
    conditions = {c["type"]: c for c in order.conditions}
    assert conditions["Ready"]["message"] == f"Quota for {CLASS} is 2 slice(s)."
    assert conditions["Provisioning"]["status"] == "False"
    sub = Subscription.objects.get(project_id=pid)
    assert {c["type"] for c in sub.conditions} == {"Ready", "Provisioning"}
    assert written == 2  # the order and its subscription
    assert (applying.writes, applied.writes) == (1, 1)

    stamp = (order.updated_at, sub.updated_at)
    with counting_write_transactions() as rerun:
        assert lifecycle.store_outcome(_step(pid, Step.APPLIED)) == 0
    order.refresh_from_db()
    sub.refresh_from_db()
    assert rerun.writes == 0
    assert (order.updated_at, sub.updated_at) == stamp


def test_an_impossible_transition_stores_nothing_of_the_outcome(world) -> None:
    order = _buy(world)
    sub = Subscription.objects.get(project=world.project_a)
    lifecycle.store_outcome(ProjectOutcome(orders=(OrderOutcome(order.pk, state=o.ACTIVE),)))
    outcome = ProjectOutcome(
        orders=(
            OrderOutcome(order.pk, (Condition("Failed", "True", "Late", "too late"),), o.FAILED),
        ),
    )
    bad = ProjectOutcome(outcome.orders, _step(world.project_a.pk, Step.APPLIED).subscriptions)
    with pytest.raises(lifecycle.InvalidTransitionError):
        lifecycle.store_outcome(bad)
    order.refresh_from_db()
    sub.refresh_from_db()
    assert order.state == o.ACTIVE
    assert order.conditions == []
    assert sub.conditions == [], "the subscription's part of a failed outcome was stored"
