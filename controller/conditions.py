"""Subscription conditions: computed by a pure function, written only when they change.

`subscription_conditions()` says what Ready / Provisioning / Failed should read for one
subscription at a step of the reconcile; `report_subscriptions()` compares that with what is stored
and calls `portal.orders.lifecycle.set_subscription_condition` only for a difference, so a no-op
resync writes nothing to the database either. observedGeneration is the subscription's `version`
(bumped by every order): a reader can tell whether the controller has acted on the latest order.
"""

from __future__ import annotations

from enum import Enum

from portal.orders import lifecycle
from portal.orders.models import Subscription


class Step(Enum):
    """Where the reconcile stands when it reports."""

    APPLYING = "applying"  # open orders seen, objects not yet applied
    APPLIED = "applied"  # the cluster matches the database
    FAILED = "failed"  # the API server refused the project's objects for good


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
        return [("Provisioning", "True", "Applying", f"Applying the quota for {device_class}.")]
    if step is Step.FAILED:
        reason, message = failure or ("Unknown", "")
        return [("Failed", "True", reason, message), ("Provisioning", "False", reason, message)]
    if waiting_reason:
        return [
            ("Ready", "False", "ClaimsStillAllocated", waiting_reason),
            ("Provisioning", "True", "WaitingForClaims", waiting_reason),
            ("Failed", "False", "Applied", waiting_reason),
        ]
    if quantity == 0:
        message = f"Quota for {device_class} is 0 and its claim template is removed."
        ready = ("Ready", "True", "Cancelled", message)
    else:
        note = " (organization suspended: quota held at 0 until resumed)" if suspended else ""
        message = f"Quota for {device_class} is {quantity} slice(s){note}."
        ready = ("Ready", "True", "QuotaApplied", message)
    return [
        ready,
        ("Provisioning", "False", "Applied", message),
        ("Failed", "False", "Applied", message),
    ]


def report_subscriptions(
    project_id: int,
    step: Step,
    *,
    suspended: bool = False,
    waiting: dict[str, str] | None = None,
    classes: set[str] | None = None,
    failure: tuple[str, str] | None = None,
) -> int:
    """Bring the stored conditions of the project's subscriptions (of `classes`, default all) to
    what `step` implies; returns how many were written. Idempotent.

    A Failed=False condition is only written over an earlier Failed=True: a subscription that
    never failed does not carry one."""
    written = 0
    subs = Subscription.objects.filter(project_id=project_id).values_list(
        "pk", "product__device_class", "quantity", "version", "conditions"
    )
    for pk, cls, quantity, version, stored in subs:
        if classes is not None and cls not in classes:
            continue
        have = {c.get("type"): c for c in stored or []}
        for type_, status, reason, message in subscription_conditions(
            device_class=cls,
            quantity=quantity,
            suspended=suspended,
            step=step,
            waiting_reason=(waiting or {}).get(cls, ""),
            failure=failure,
        ):
            if type_ == "Failed" and status == "False" and type_ not in have:
                continue
            want = lifecycle.make_condition(type_, status, reason, message, version)
            if lifecycle.merge_condition(list(have.values()), want) is None:
                continue
            written += lifecycle.set_subscription_condition(
                pk,
                type=type_,
                status=status,
                reason=reason,
                message=message,
                observed_generation=version,
            )
    return written
