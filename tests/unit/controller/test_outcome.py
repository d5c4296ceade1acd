"""The reconcile outcome, computed purely: order transitions and all conditions in one place."""

from __future__ import annotations

from datetime import UTC, datetime

from controller.conditions import (
    OpenOrder,
    Step,
    SubscriptionState,
    project_outcome,
    quota_message,
)
from tranche import orders as o
from tranche.outcome import Condition

CLASS = "tranche-v100-8g"
AT = datetime(2026, 1, 1, tzinfo=UTC)


def _buy(state: str = o.PENDING, order_id: int = 1) -> OpenOrder:
    return OpenOrder(order_id, o.BUY, state, CLASS, 2, AT)


def _sub(quantity: int = 2, conditions: tuple = ()) -> SubscriptionState:
    return SubscriptionState(10, CLASS, quantity, 3, conditions)


def test_applying_moves_pending_buys_to_provisioning_and_only_bought_subscriptions() -> None:
    other = SubscriptionState(11, "tranche-v100-16g", 1, 1)
    out = project_outcome(Step.APPLYING, orders=[_buy()], subscriptions=[_sub(), other])
    [order] = out.orders
    assert (order.order_id, order.state) == (1, o.PROVISIONING)
    assert order.conditions == (Condition("Provisioning", "True", "Applying", "Applying quota."),)
    assert [s.subscription_id for s in out.subscriptions] == [10]
    assert out.subscriptions[0].observed_generation == 3
    # an order already provisioning says nothing new while applying
    assert not project_outcome(Step.APPLYING, orders=[_buy(o.PROVISIONING)], subscriptions=[])


def test_applied_buy_is_active_with_the_message_built_once() -> None:
    out = project_outcome(Step.APPLIED, orders=[_buy(o.PROVISIONING)], subscriptions=[_sub()])
    [order], [sub] = out.orders, out.subscriptions
    message = quota_message(CLASS, 2, suspended=False)
    assert message == f"Quota for {CLASS} is 2 slice(s)."
    assert (order.state, order.message) == (o.ACTIVE, message)
    assert {c.type: c.reason for c in order.conditions} == {
        "Provisioning": "Applied",
        "Ready": "QuotaApplied",
    }
    assert {c.message for c in order.conditions + sub.conditions} == {message}
    # never failed: no Failed=False on the subscription
    assert "Failed" not in {c.type for c in sub.conditions}
    failed_before = ({"type": "Failed", "status": "True"},)
    again = project_outcome(Step.APPLIED, orders=[], subscriptions=[_sub(2, failed_before)])
    assert ("Failed", "False") in {(c.type, c.status) for c in again.subscriptions[0].conditions}


def test_cancel_waits_for_claims_then_is_cancelled() -> None:
    cancel = OpenOrder(2, o.CANCEL, o.PENDING, CLASS, 0, AT)
    waiting = project_outcome(
        Step.APPLIED, orders=[cancel], subscriptions=[_sub(0)], waiting={CLASS: "2 allocated"}
    )
    assert waiting.orders[0].state == o.CANCELLING
    assert waiting.orders[0].conditions[0].reason == "ClaimsStillAllocated"
    done = project_outcome(Step.APPLIED, orders=[cancel], subscriptions=[_sub(0)])
    assert done.orders[0].state == o.CANCELLED
    assert done.subscriptions[0].conditions[0].reason == "Cancelled"


def test_refusal_fails_every_open_order_with_the_api_reason() -> None:
    out = project_outcome(
        Step.FAILED,
        orders=[_buy(o.PROVISIONING), OpenOrder(3, o.CANCEL, o.PENDING, CLASS, 0, AT)],
        subscriptions=[_sub()],
        failure=("Invalid", "bad quota"),
    )
    assert [(x.state, x.failure_reason) for x in out.orders] == [(o.FAILED, "Invalid")] * 2
    assert "bad quota" in out.orders[0].message
    assert out.subscriptions[0].conditions[0] == Condition("Failed", "True", "Invalid", "bad quota")


def _stored(outcome) -> dict[int, tuple]:
    """The subscriptions' conditions as `store_outcome` would leave them after `outcome`."""
    from portal.orders.lifecycle import make_condition, merge_condition

    stored = {}
    for want in outcome.subscriptions:
        conditions: list = []
        for c in want.conditions:
            made = make_condition(c.type, c.status, c.reason, c.message, want.observed_generation)
            conditions = merge_condition(conditions, made) or conditions
        stored[want.subscription_id] = tuple(conditions)
    return stored


def test_a_stored_outcome_is_known_to_change_nothing_without_a_query() -> None:
    from portal.orders.lifecycle import changes_nothing

    applied = project_outcome(Step.APPLIED, orders=[], subscriptions=[_sub()])
    assert changes_nothing(applied, _stored(applied))
    assert not changes_nothing(applied, {})  # nothing stored yet
    resized = project_outcome(Step.APPLIED, orders=[], subscriptions=[_sub(quantity=3)])
    assert not changes_nothing(resized, _stored(applied))  # the quota message differs
    # an outcome that moves an order is never judged without reading the order
    with_order = project_outcome(Step.APPLIED, orders=[_buy()], subscriptions=[_sub()])
    assert not changes_nothing(with_order, _stored(with_order))
