"""Order services and views: roles, suspension, idempotency, bounds, CAS, lifecycle."""

from __future__ import annotations

import itertools
import threading

import pytest
from django.db import connection

from portal.audit.models import AuditLog
from portal.cluster.models import ProjectUsage
from portal.cluster.services import record_namespace
from portal.orders import lifecycle
from portal.orders.models import Order, Subscription
from portal.orders.services import place_order
from portal.tenants.errors import NotAllowedError, OrganizationSuspendedError, ServiceError
from portal.tenants.services import suspend_organization
from tests.helpers.factories import make_world
from tranche.observed import ClassUsage, NamespaceView
from tranche.outcome import Condition, OrderOutcome, ProjectOutcome


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


def _move(order_id: int, state: str, **fields) -> int:
    """Store one order's transition the way the reconcile does (`store_outcome`)."""
    return lifecycle.store_outcome(
        ProjectOutcome(orders=(OrderOutcome(order_id, state=state, **fields),))
    )


def test_lifecycle_is_cas_and_idempotent(world):
    order, _ = _order(world, world.owner, 1, "k")
    assert _move(order.pk, "provisioning")
    assert not _move(order.pk, "provisioning")
    assert _move(order.pk, "active")
    assert not _move(order.pk, "active")
    with pytest.raises(lifecycle.InvalidTransitionError):
        _move(order.pk, "failed", failure_reason="Oops", message="too late")
    order.refresh_from_db()
    assert [e.to_state for e in order.events.all()] == ["pending", "provisioning", "active"]
    cancel, _ = _order(world, world.owner, 0, "c")
    with pytest.raises(lifecycle.InvalidTransitionError):
        _move(cancel.pk, "provisioning")
    assert _move(cancel.pk, "cancelling")
    assert _move(cancel.pk, "cancelled")
    failed, _ = _order(world, world.owner, 2, "f")
    assert _move(failed.pk, "failed", failure_reason="QuotaApplyFailed", message="refused")
    failed.refresh_from_db()
    assert (failed.state, failed.failure_reason) == ("failed", "QuotaApplyFailed")


def test_conditions_written_only_when_changed(world):
    order, _ = _order(world, world.owner, 1, "k")

    def condition(message: str) -> int:
        wanted = Condition("QuotaApplied", "True", "Applied", message)
        return lifecycle.store_outcome(
            ProjectOutcome(orders=(OrderOutcome(order.pk, conditions=(wanted,)),))
        )

    assert condition("ok")
    assert not condition("ok")
    assert condition("still ok")
    order.refresh_from_db()
    (cond,) = order.conditions
    assert cond["message"] == "still ok"
    assert cond["observedGeneration"] == 1
    assert "lastTransitionTime" in cond


def test_slice_usage_written_only_when_changed(world):
    p, ns = world.project_a.pk, world.project_a.namespace
    cls = "tranche-v100-8g"
    waiting = NamespaceView(ns, usage={cls: ClassUsage(1, 1, "no free GPU")})
    record_namespace(waiting)
    stamp = ProjectUsage.objects.get(project_id=p).updated_at
    record_namespace(waiting)
    assert ProjectUsage.objects.get(project_id=p).updated_at == stamp, "rewritten unchanged"
    record_namespace(NamespaceView(ns, usage={cls: ClassUsage(2, 0, "")}))
    assert ProjectUsage.objects.get().allocated == 2
    record_namespace(NamespaceView(ns))  # every claim gone: the product's line says 0
    assert (ProjectUsage.objects.get().allocated, ProjectUsage.objects.get().pending) == (0, 0)
