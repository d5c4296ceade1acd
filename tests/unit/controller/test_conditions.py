"""Subscription conditions: the pure computation and the write-if-changed merge."""

from __future__ import annotations

from controller.conditions import Step, subscription_conditions
from portal.orders.lifecycle import make_condition, merge_condition

CLASS = "tranche-v100-8g"


def test_applied_subscription_is_ready_with_its_quota() -> None:
    got = subscription_conditions(
        device_class=CLASS, quantity=2, suspended=False, step=Step.APPLIED
    )
    assert got[0] == ("Ready", "True", "QuotaApplied", f"Quota for {CLASS} is 2 slice(s).")
    assert got[1][:3] == ("Provisioning", "False", "Applied")


def test_suspension_cancel_wait_and_failure_say_why() -> None:
    suspended = subscription_conditions(
        device_class=CLASS, quantity=2, suspended=True, step=Step.APPLIED
    )
    assert "suspended" in suspended[0][3]
    waiting = subscription_conditions(
        device_class=CLASS, quantity=0, suspended=False, step=Step.APPLIED, waiting_reason="busy"
    )
    assert waiting[0] == ("Ready", "False", "ClaimsStillAllocated", "busy")
    failed = subscription_conditions(
        device_class=CLASS,
        quantity=2,
        suspended=False,
        step=Step.FAILED,
        failure=("Invalid", "bad quota"),
    )
    assert failed[0] == ("Failed", "True", "Invalid", "bad quota")


def test_merge_writes_only_on_change_and_keeps_transition_time_unless_status_flips() -> None:
    ready = make_condition("Ready", "True", "QuotaApplied", "2 slices", 1)
    first = merge_condition([], ready)
    assert first is not None
    assert first[0]["lastTransitionTime"]
    assert merge_condition(first, ready) is None  # same content: no write
    resized = merge_condition(first, make_condition("Ready", "True", "QuotaApplied", "3", 2))
    assert resized[0]["observedGeneration"] == 2
    assert resized[0]["lastTransitionTime"] == first[0]["lastTransitionTime"]
    flipped = merge_condition(first, make_condition("Ready", "False", "Failed", "no", 2))
    assert flipped[0]["status"] == "False"
