"""Services the controller calls to move orders through their state machine and report usage.

State machine (compare-and-swap `UPDATE … WHERE state IN (allowed sources)`):
    buy/resize: pending → provisioning → active;   pending|provisioning → failed (with reason)
    cancel:     pending → cancelling → cancelled;  pending|cancelling → failed (with reason)
Every function is idempotent: calling it again when the order is already in the target state
returns False and writes nothing. Calling it from a state that cannot reach the target raises
`InvalidTransitionError`. Each real change appends a history entry and an audit row.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from portal.audit.services import record_audit
from portal.catalog.models import Product
from portal.orders.models import Order, OrderEvent, ProjectUsage, Subscription

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


def _transition(order_id: int, target: str, message: str = "", **fields: Any) -> bool:
    kinds, sources = TRANSITIONS[target]
    with transaction.atomic():
        order = Order.objects.get(pk=order_id)
        if order.state == target:
            return False
        if order.kind not in kinds or order.state not in sources:
            raise InvalidTransitionError(
                f"order {order_id} ({order.kind}) {order.state} → {target}"
            )
        changed = Order.objects.filter(pk=order_id, state=order.state).update(
            state=target, updated_at=timezone.now(), **fields
        )
        if not changed:  # lost the race; the winner's state is what counts
            return False
        OrderEvent.objects.create(
            order=order,
            from_state=order.state,
            to_state=target,
            actor_label=f"system:{SYSTEM}",
            message=message[:500],
        )
        record_audit(
            actor=None,
            system=SYSTEM,
            action=f"order.{target}",
            obj=order,
            organization_id=order.organization_id,
            before={"state": order.state},
            after={"state": target, **{k: str(v) for k, v in fields.items()}},
        )
        return True


def mark_order_provisioning(order_id: int) -> bool:
    """pending → provisioning (buy/resize)."""
    return _transition(order_id, S.PROVISIONING)


def mark_order_active(order_id: int, message: str = "") -> bool:
    """pending|provisioning → active (buy/resize): the quota now matches the subscription."""
    return _transition(order_id, S.ACTIVE, message)


def mark_order_cancelling(order_id: int) -> bool:
    """pending → cancelling (cancel)."""
    return _transition(order_id, S.CANCELLING)


def mark_order_cancelled(order_id: int, message: str = "") -> bool:
    """pending|cancelling → cancelled (cancel): the quota for the product is gone."""
    return _transition(order_id, S.CANCELLED, message)


def mark_order_failed(order_id: int, reason: str, message: str) -> bool:
    """Any open state → failed, with a CamelCase `reason` and a human `message`."""
    return _transition(
        order_id, S.FAILED, message, failure_reason=reason[:64], failure_message=message[:500]
    )


def set_order_condition(
    order_id: int,
    *,
    type: str,
    status: str,
    reason: str,
    message: str = "",
    observed_generation: int | None = None,
) -> bool:
    """Upsert one condition by `type`; writes (and bumps lastTransitionTime) only on change."""
    with transaction.atomic():
        order = Order.objects.select_for_update().get(pk=order_id)
        generation = order.generation if observed_generation is None else observed_generation
        merged = merge_condition(
            order.conditions or [], make_condition(type, status, reason, message, generation)
        )
        if merged is None:
            return False
        Order.objects.filter(pk=order_id).update(conditions=merged, updated_at=timezone.now())
        return True


def record_slice_usage(
    *, project_id: int, device_class: str, allocated: int, pending: int, pending_reason: str = ""
) -> bool:
    """Store claims allocated/pending of one DeviceClass in a project; writes only on change."""
    product = Product.objects.filter(device_class=device_class).first()
    if product is None:
        raise ValueError(f"unknown DeviceClass {device_class!r}")
    values = {"allocated": allocated, "pending": pending, "pending_reason": pending_reason[:500]}
    with transaction.atomic():
        usage, created = ProjectUsage.objects.get_or_create(
            project_id=project_id, product=product, defaults=values
        )
        if created:
            return True
        if all(getattr(usage, k) == v for k, v in values.items()):
            return False
        ProjectUsage.objects.filter(pk=usage.pk).update(updated_at=timezone.now(), **values)
        return True


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


def set_subscription_condition(
    subscription_id: int,
    *,
    type: str,
    status: str,
    reason: str,
    message: str = "",
    observed_generation: int | None = None,
) -> bool:
    """Upsert one condition of a subscription by `type`; writes only on change (idempotent).

    `observed_generation` defaults to the subscription's `version` (bumped by every order), so a
    reader can tell whether the controller has seen the latest order. Returns True if written."""
    with transaction.atomic():
        sub = Subscription.objects.select_for_update().get(pk=subscription_id)
        generation = sub.version if observed_generation is None else observed_generation
        merged = merge_condition(
            sub.conditions or [], make_condition(type, status, reason, message, generation)
        )
        if merged is None:
            return False
        Subscription.objects.filter(pk=subscription_id).update(
            conditions=merged, updated_at=timezone.now()
        )
        return True
