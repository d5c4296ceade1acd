"""The order state machine, written by the controller (through `controller.store`).

`store_outcome(outcome)` is the one way in: the order transitions and the order and subscription
conditions of one reconcile step, written in ONE transaction (a crash leaves either all of it or
none), each row only if it changes; `changes_nothing(outcome, stored)` tells without a query
whether storing would change anything (the resync skips settled projects with it).

State machine (compare-and-swap `UPDATE … WHERE state IN (allowed sources)`):
    buy/resize: pending → provisioning → active;   pending|provisioning → failed (with reason)
    cancel:     pending → cancelling → cancelled;  pending|cancelling → failed (with reason)
Storing an outcome again when the orders are already where it says writes nothing. A transition
from a state that cannot reach the target raises `InvalidTransitionError` and nothing of the
outcome is stored. Each real change appends a history entry and an audit row.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.utils import timezone

from portal.audit.models import AuditLog
from portal.audit.services import audit_row, record_audits
from portal.core import figures
from portal.orders.models import Order, OrderEvent, Subscription
from tranche.outcome import Condition, OrderOutcome, ProjectOutcome

S, K = Order.State, Order.Kind
SYSTEM = "controller"

# target state → (kinds it applies to, states it may come from)
TRANSITIONS: dict[str, tuple[set[str], set[str]]] = {
    S.PROVISIONING: ({K.BUY, K.RESIZE}, {S.PENDING}),
    S.ACTIVE: ({K.BUY, K.RESIZE}, {S.PENDING, S.PROVISIONING}),
    S.CANCELLING: ({K.CANCEL}, {S.PENDING}),
    S.CANCELLED: ({K.CANCEL}, {S.PENDING, S.CANCELLING}),
    S.FAILED: ({K.BUY, K.RESIZE, K.CANCEL}, {S.PENDING, S.PROVISIONING, S.CANCELLING}),
}


class InvalidTransitionError(Exception):
    """The order cannot reach the requested state from where it is (e.g. active → failed)."""


def _check_transition(order: Order, target: str) -> None:
    kinds, sources = TRANSITIONS[target]
    if order.kind not in kinds or order.state not in sources:
        raise InvalidTransitionError(f"order {order.pk} ({order.kind}) {order.state} → {target}")


def _transition_rows(
    order: Order, target: str, message: str, fields: dict[str, Any]
) -> tuple[OrderEvent, AuditLog]:
    """History entry and audit row of a transition that happened (stored with the outcome)."""
    event = OrderEvent(
        order=order,
        from_state=order.state,
        to_state=target,
        actor_label=f"system:{SYSTEM}",
        message=message[:500],
    )
    audit = audit_row(
        actor=None,
        system=SYSTEM,
        action=f"order.{target}",
        obj=order,
        organization_id=order.organization_id,
        before={"state": order.state},
        after={"state": target, **{k: str(v) for k, v in fields.items()}},
    )
    return event, audit


def _merged(
    stored: list[dict[str, Any]], wanted: Iterable[Condition], generation: int
) -> list | None:
    """`stored` with every wanted condition upserted, or None if nothing would change."""
    conditions, changed = list(stored or []), False
    for c in wanted:
        merged = merge_condition(
            conditions, make_condition(c.type, c.status, c.reason, c.message, generation)
        )
        if merged is not None:
            conditions, changed = merged, True
    return conditions if changed else None


def _store_order(order: Order, want: OrderOutcome, trail: list[tuple]) -> bool:
    fields: dict[str, Any] = {}
    conditions = _merged(order.conditions, want.conditions, order.generation)
    if conditions is not None:
        fields["conditions"] = conditions
    moving = want.state is not None and want.state != order.state
    transition: dict[str, Any] = {}
    if moving:
        _check_transition(order, want.state)
        if want.state == S.FAILED:
            transition = {
                "failure_reason": want.failure_reason[:64],
                "failure_message": want.message[:500],
            }
        fields.update(state=want.state, **transition)
    if not fields:
        return False
    changed = Order.objects.filter(pk=order.pk, state=order.state).update(
        updated_at=timezone.now(), **fields
    )
    if changed and moving:
        trail.append(_transition_rows(order, want.state, want.message, transition))
    return bool(changed)


def store_outcome(outcome: ProjectOutcome) -> int:
    """Write one reconcile step's outcome in one transaction; returns the rows changed.

    Idempotent: storing the same outcome again changes nothing. Rows are locked subscriptions
    first, then orders (the order `place_order` takes them in). A transition the order cannot
    make raises InvalidTransitionError and nothing of the outcome is stored."""
    if not outcome:
        return 0
    written = 0
    with transaction.atomic():
        subs = Subscription.objects.select_for_update().in_bulk(
            [s.subscription_id for s in outcome.subscriptions]
        )
        # The product comes along (a transition's audit line names it) without being locked.
        orders = (
            Order.objects.select_for_update(of=("self",))
            .select_related("product")
            .in_bulk([o.order_id for o in outcome.orders])
        )
        trail: list[tuple[OrderEvent, AuditLog]] = []
        for want in outcome.orders:
            written += _store_order(orders[want.order_id], want, trail)
        if trail:  # the history and audit rows of every transition: one INSERT each
            OrderEvent.objects.bulk_create([event for event, _audit in trail])
            record_audits([audit for _event, audit in trail])
        now = timezone.now()
        for want in outcome.subscriptions:
            sub = subs[want.subscription_id]
            conditions = _merged(sub.conditions, want.conditions, want.observed_generation)
            if conditions is not None:
                Subscription.objects.filter(pk=sub.pk).update(conditions=conditions, updated_at=now)
                written += 1
        if written:
            for project_id in {r.project_id for r in [*subs.values(), *orders.values()]}:
                figures.changed(project_id)
    return written


def changes_nothing(outcome: ProjectOutcome, stored: dict[int, tuple[dict[str, Any], ...]]) -> bool:
    """True if `store_outcome(outcome)` would write nothing, judged from the subscriptions'
    stored conditions in `stored` (subscription id -> conditions) without a query (pure).

    Only an outcome about subscriptions alone can be judged so: one that moves or conditions an
    order is never said to change nothing (only `store_outcome` reads the orders)."""
    if outcome.orders:
        return False
    return all(
        _merged(list(stored.get(want.subscription_id, ())), want.conditions,
                want.observed_generation) is None
        for want in outcome.subscriptions
    )  # fmt: skip


def merge_condition(conditions: list[dict[str, Any]], new: dict[str, Any]) -> list | None:
    """`conditions` with `new` upserted by type, or None if nothing would change (pure).

    lastTransitionTime moves only when the status flips; reason/message/observedGeneration
    changes keep it."""
    merged = list(conditions)
    for i, cond in enumerate(merged):
        if cond.get("type") == new["type"]:
            if {k: cond.get(k) for k in new} == new:
                return None
            keep = cond.get("status") == new["status"] and cond.get("lastTransitionTime")
            merged[i] = {**new, "lastTransitionTime": keep or timezone.now().isoformat()}
            return merged
    merged.append({**new, "lastTransitionTime": timezone.now().isoformat()})
    return merged


def make_condition(
    type: str, status: str, reason: str, message: str, observed_generation: int
) -> dict[str, Any]:
    """One condition without its lastTransitionTime (what `merge_condition` compares)."""
    if status not in ("True", "False", "Unknown"):
        raise ValueError(f"condition status must be True/False/Unknown, not {status!r}")
    return {
        "type": type,
        "status": status,
        "reason": reason,
        "message": message[:500],
        "observedGeneration": observed_generation,
    }
