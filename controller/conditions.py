"""The outcome of a reconcile step for one project, computed purely: order transitions and the
conditions of orders and subscriptions, in one place.

`project_outcome()` takes what the database holds (open orders, subscriptions with their stored
conditions) and where the reconcile stands (`Step`), and returns a `tranche.outcome.ProjectOutcome`
that `portal.orders.lifecycle.store_outcome` writes in one transaction, each row only if it
changes (so a no-op resync writes nothing). observedGeneration of a subscription is its `version`
(bumped by every order): a reader can tell whether the controller has acted on the latest order.
The tenant-visible messages are built here once (`quota_message`, `cancelled_message`, ...).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from tranche import orders as o
from tranche.outcome import Condition, OrderOutcome, ProjectOutcome, SubscriptionOutcome


class Step(Enum):
    """Where the reconcile stands when it reports."""

    APPLYING = "applying"  # open orders seen, objects not yet applied
    APPLIED = "applied"  # the cluster matches the database
    FAILED = "failed"  # the API server refused the project's objects for good


@dataclass(frozen=True)
class OpenOrder:
    """An order the reconcile still has to finish."""

    id: int
    kind: str
    state: str
    device_class: str
    quantity: int
    created_at: datetime


@dataclass(frozen=True)
class SubscriptionState:
    """A subscription as stored: its class, quantity, version and current conditions."""

    id: int
    device_class: str
    quantity: int
    version: int
    conditions: tuple[dict[str, Any], ...] = ()


def quota_message(device_class: str, quantity: int, suspended: bool) -> str:
    """What the tenant reads once a quantity is applied."""
    note = " (organization suspended: quota held at 0 until resumed)" if suspended else ""
    return f"Quota for {device_class} is {quantity} slice(s){note}."


def cancelled_message(device_class: str) -> str:
    return f"Quota for {device_class} is 0 and its claim template is removed."


def refused_message(reason: str, message: str) -> str:
    """What the tenant reads on an order the API server refused for good."""
    return (
        f"Kubernetes refused the project's objects ({reason}): {message}. "
        "Support has been notified; your previous quota is unchanged."
    )


def subscription_conditions(
    *,
    device_class: str,
    quantity: int,
    suspended: bool,
    step: Step,
    waiting_reason: str = "",
    failure: tuple[str, str] | None = None,
) -> list[tuple[str, str, str, str]]:
    """(type, status, reason, message) to hold for one subscription (pure)."""
    if step is Step.APPLYING:
        return [
            (
                o.PROVISIONING_CONDITION,
                "True",
                o.REASON_APPLYING,
                f"Applying the quota for {device_class}.",
            )
        ]
    if step is Step.FAILED:
        reason, message = failure or (o.REASON_UNKNOWN, "")
        return [
            (o.FAILED_CONDITION, "True", reason, message),
            (o.PROVISIONING_CONDITION, "False", reason, message),
        ]
    if waiting_reason:
        return [
            (o.READY, "False", o.REASON_CLAIMS_STILL_ALLOCATED, waiting_reason),
            (o.PROVISIONING_CONDITION, "True", o.REASON_WAITING_FOR_CLAIMS, waiting_reason),
            (o.FAILED_CONDITION, "False", o.REASON_APPLIED, waiting_reason),
        ]
    if quantity == 0:
        message = cancelled_message(device_class)
        ready = (o.READY, "True", o.REASON_CANCELLED, message)
    else:
        message = quota_message(device_class, quantity, suspended)
        ready = (o.READY, "True", o.REASON_QUOTA_APPLIED, message)
    return [
        ready,
        (o.PROVISIONING_CONDITION, "False", o.REASON_APPLIED, message),
        (o.FAILED_CONDITION, "False", o.REASON_APPLIED, message),
    ]


def order_outcome(
    order: OpenOrder,
    step: Step,
    *,
    subscribed: dict[str, int],
    suspended: bool,
    waiting: dict[str, str],
    failure: tuple[str, str] | None = None,
) -> OrderOutcome | None:
    """Conditions and target state of one open order at `step` (None: nothing to say)."""
    cls, buying = order.device_class, order.kind in (o.BUY, o.RESIZE)
    if step is Step.APPLYING:
        if order.state != o.PENDING or not buying:
            return None
        applying = Condition(o.PROVISIONING_CONDITION, "True", o.REASON_APPLYING, "Applying quota.")
        return OrderOutcome(order.id, (applying,), o.PROVISIONING)
    if step is Step.FAILED:
        reason, detail = failure or (o.REASON_UNKNOWN, "")
        message = refused_message(reason, detail)
        failed = Condition(o.FAILED_CONDITION, "True", reason, message)
        return OrderOutcome(order.id, (failed,), o.FAILED, message, failure_reason=reason)
    if buying:
        message = quota_message(cls, subscribed.get(cls, 0), suspended)
        return OrderOutcome(
            order.id,
            (
                Condition(o.PROVISIONING_CONDITION, "False", o.REASON_APPLIED, message),
                Condition(o.READY, "True", o.REASON_QUOTA_APPLIED, message),
            ),
            o.ACTIVE,
            message,
        )
    if cls in waiting:
        ready = Condition(o.READY, "False", o.REASON_CLAIMS_STILL_ALLOCATED, waiting[cls])
        return OrderOutcome(order.id, (ready,), o.CANCELLING)
    message = cancelled_message(cls)
    ready = Condition(o.READY, "True", o.REASON_CANCELLED, message)
    return OrderOutcome(order.id, (ready,), o.CANCELLED, message)


def project_outcome(
    step: Step,
    *,
    orders: Iterable[OpenOrder],
    subscriptions: Iterable[SubscriptionState],
    suspended: bool = False,
    waiting: dict[str, str] | None = None,
    failure: tuple[str, str] | None = None,
) -> ProjectOutcome:
    """Everything a reconcile step writes for a project (pure).

    While applying, only the subscriptions being bought report Provisioning. A Failed=False
    condition is only written over an earlier Failed one: a subscription that never failed does
    not carry one."""
    orders, subscriptions, waiting = tuple(orders), tuple(subscriptions), waiting or {}
    subscribed = {s.device_class: s.quantity for s in subscriptions}
    order_outcomes = tuple(
        oo
        for order in orders
        if (oo := order_outcome(order, step, subscribed=subscribed, suspended=suspended,
                                waiting=waiting, failure=failure))
    )  # fmt: skip
    classes = None
    if step is Step.APPLYING:
        classes = {order.device_class for order in orders if order.kind != o.CANCEL}
    sub_outcomes = []
    for sub in subscriptions:
        if classes is not None and sub.device_class not in classes:
            continue
        stored = {c.get("type") for c in sub.conditions}
        wanted = tuple(
            Condition(*c)
            for c in subscription_conditions(
                device_class=sub.device_class,
                quantity=sub.quantity,
                suspended=suspended,
                step=step,
                waiting_reason=waiting.get(sub.device_class, ""),
                failure=failure,
            )
            if not (c[0] == o.FAILED_CONDITION and c[1] == "False" and c[0] not in stored)
        )
        sub_outcomes.append(SubscriptionOutcome(sub.id, sub.version, wanted))
    return ProjectOutcome(order_outcomes, tuple(sub_outcomes))
