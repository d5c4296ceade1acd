"""Reconcile reports each subscription's Ready/Provisioning conditions, writing only on change."""

from __future__ import annotations

from controller.reconcile import reconcile_project

CLASS = "tranche-v100-8g"


def _conditions(sub) -> dict[str, dict]:
    sub.refresh_from_db()
    return {c["type"]: c for c in sub.conditions}


def test_subscription_conditions_follow_orders_and_noop_writes_nothing(tenant, applier) -> None:
    from portal.orders.models import Subscription

    tenant.order(CLASS, 2)
    reconcile_project(tenant.project.pk, applier)
    sub = Subscription.objects.get(project=tenant.project, product__device_class=CLASS)
    first = _conditions(sub)
    assert first["Ready"]["status"] == "True", first
    assert first["Ready"]["reason"] == "QuotaApplied"
    assert first["Ready"]["message"] == f"Quota for {CLASS} is 2 slice(s)."
    assert first["Ready"]["observedGeneration"] == sub.version
    assert first["Provisioning"]["status"] == "False"
    assert "Failed" not in first, "a subscription that never failed carries no Failed condition"

    stamp = sub.updated_at
    result = reconcile_project(tenant.project.pk, applier)
    sub.refresh_from_db()
    assert result.writes == 0
    assert sub.updated_at == stamp, "a no-op reconcile rewrote the subscription's conditions"

    tenant.order(CLASS, 3)
    reconcile_project(tenant.project.pk, applier)
    resized = _conditions(sub)
    assert resized["Ready"]["message"] == f"Quota for {CLASS} is 3 slice(s)."
    assert (
        resized["Ready"]["observedGeneration"] == sub.version > first["Ready"]["observedGeneration"]
    )
    assert resized["Ready"]["lastTransitionTime"] == first["Ready"]["lastTransitionTime"]
