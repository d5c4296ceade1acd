"""Order services and views: roles, suspension, idempotency, bounds, CAS, lifecycle."""

from __future__ import annotations

import itertools
import threading

import pytest
from django.db import connection

from portal.audit.models import AuditLog
from portal.orders import lifecycle
from portal.orders.models import Order, ProjectUsage, Subscription
from portal.orders.services import place_order
from portal.tenants.errors import NotAllowedError, OrganizationSuspendedError, ServiceError
from portal.tenants.services import suspend_organization
from tests.helpers.factories import make_world


def _order(world, user, qty, key, *, product="tranche-v100-8g", project=None):
    return place_order(
        membership=world.membership(user),
        project=project or world.project_a,
        product=world.products[product],
        quantity=qty,
        idempotency_key=key,
    )


def test_buy_resize_cancel_change_subscription_and_audit(
    world, sent_reconciles, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        buy, created = _order(world, world.owner, 2, "k1")
    assert created
    assert (buy.kind, buy.state, buy.from_quantity, buy.quantity) == ("buy", "pending", 0, 2)
    assert buy.monthly_total == 180
    assert buy.prorata_charge > 0
    assert sent_reconciles == [world.project_a.pk]
    resize, _ = _order(world, world.member, 3, "k2")
    assert (resize.kind, resize.from_quantity) == ("resize", 2)
    cancel, _ = _order(world, world.member, 0, "k3")
    assert cancel.kind == "cancel"
    assert cancel.prorata_charge < 0  # docs/billing.md: a cancel is credited to the hour
    assert Subscription.objects.get(project=world.project_a).quantity == 0
    actions = list(AuditLog.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["order.buy", "order.resize", "order.cancel"]
    assert buy.events.get().to_state == "pending"


def test_viewer_cannot_order(world):
    with pytest.raises(NotAllowedError):
        _order(world, world.viewer, 1, "k")
    assert not Order.objects.exists()


def test_outsider_cannot_order_for_another_org_project(world):
    with pytest.raises(ServiceError):
        _order(world, world.outsider, 1, "k", project=world.project_a)
    assert not Order.objects.exists()


def test_suspended_organization_cannot_order(world):
    suspend_organization(actor=None, organization_id=world.org_a.pk, reason="unpaid invoice")
    with pytest.raises(OrganizationSuspendedError, match=r"unpaid invoice.*Contact billing"):
        _order(world, world.owner, 1, "k")


def test_idempotency_key_dedups(world):
    first, created1 = _order(world, world.owner, 2, "same")
    second, created2 = _order(world, world.owner, 2, "same")
    assert (created1, created2) == (True, False)
    assert first.pk == second.pk
    assert Order.objects.count() == 1
    with pytest.raises(ServiceError, match="already used for a different order"):
        _order(world, world.owner, 3, "same")


@pytest.mark.parametrize(
    ("qty", "message"),
    [(17, "between 0 and 16"), (-1, "between 0 and 16"), (0, "nothing would change")],
)
def test_quantity_bounds(world, qty, message):
    with pytest.raises(ServiceError, match=message):
        _order(world, world.owner, qty, "k")


@pytest.mark.django_db(transaction=True)
def test_concurrent_resizes_end_consistent():
    world = make_world()
    _order(world, world.owner, 1, "base")
    targets = [2, 3, 4, 5, 6, 7]
    errors: list[Exception] = []
    barrier = threading.Barrier(len(targets))

    def resize(qty: int) -> None:
        try:
            barrier.wait(timeout=10)
            _order(world, world.owner, qty, f"resize-{qty}")
        except Exception as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=resize, args=(q,)) for q in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    sub = Subscription.objects.get(project=world.project_a)
    orders = list(Order.objects.filter(subscription=sub).order_by("created_at", "id"))
    assert len(orders) == 7
    assert sub.version == 7
    # The orders form one unbroken chain: each starts where the previous ended.
    for before, after in itertools.pairwise(orders):
        assert after.from_quantity == before.quantity
    assert sub.quantity == orders[-1].quantity


def test_lifecycle_is_cas_and_idempotent(world):
    order, _ = _order(world, world.owner, 1, "k")
    assert lifecycle.mark_order_provisioning(order.pk)
    assert not lifecycle.mark_order_provisioning(order.pk)
    assert lifecycle.mark_order_active(order.pk)
    assert not lifecycle.mark_order_active(order.pk)
    with pytest.raises(lifecycle.InvalidTransitionError):
        lifecycle.mark_order_failed(order.pk, "Oops", "too late")
    order.refresh_from_db()
    assert [e.to_state for e in order.events.all()] == ["pending", "provisioning", "active"]
    cancel, _ = _order(world, world.owner, 0, "c")
    with pytest.raises(lifecycle.InvalidTransitionError):
        lifecycle.mark_order_provisioning(cancel.pk)
    assert lifecycle.mark_order_cancelling(cancel.pk)
    assert lifecycle.mark_order_cancelled(cancel.pk)
    failed, _ = _order(world, world.owner, 2, "f")
    assert lifecycle.mark_order_failed(failed.pk, "QuotaApplyFailed", "API server refused")
    failed.refresh_from_db()
    assert (failed.state, failed.failure_reason) == ("failed", "QuotaApplyFailed")


def test_conditions_written_only_when_changed(world):
    order, _ = _order(world, world.owner, 1, "k")
    args = {"type": "QuotaApplied", "status": "True", "reason": "Applied", "message": "ok"}
    assert lifecycle.set_order_condition(order.pk, **args)
    assert not lifecycle.set_order_condition(order.pk, **args)
    assert lifecycle.set_order_condition(order.pk, **{**args, "message": "still ok"})
    order.refresh_from_db()
    (cond,) = order.conditions
    assert cond["message"] == "still ok"
    assert cond["observedGeneration"] == 1
    assert "lastTransitionTime" in cond


def test_slice_usage_written_only_when_changed(world):
    p = world.project_a.pk
    assert lifecycle.record_slice_usage(
        project_id=p,
        device_class="tranche-v100-8g",
        allocated=1,
        pending=1,
        pending_reason="no free GPU",
    )
    assert not lifecycle.record_slice_usage(
        project_id=p,
        device_class="tranche-v100-8g",
        allocated=1,
        pending=1,
        pending_reason="no free GPU",
    )
    assert lifecycle.record_slice_usage(
        project_id=p, device_class="tranche-v100-8g", allocated=2, pending=0
    )
    assert ProjectUsage.objects.get().allocated == 2
