"""Billing and support staff in the Django admin: actions call services, permissions hold."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.orders.services import place_order
from portal.tenants.models import Organization
from tests.helpers.factories import make_staff


@pytest.fixture
def billing(world):
    return make_staff("bill", "Billing")


@pytest.fixture
def support(world):
    return make_staff("sue", "Support")


def _suspend(client, org):
    return client.post(
        reverse("admin:tenants_organization_changelist"),
        {"action": "suspend", "_selected_action": [org.pk]},
    )


def test_billing_suspends_and_tenant_sees_message(world, billing, client):
    client.force_login(billing)
    assert _suspend(client, world.org_a).status_code == 302
    assert Organization.objects.get(pk=world.org_a.pk).is_suspended
    client.force_login(world.owner)
    url = reverse("order_confirm", args=[world.project_a.pk])
    data = {"product": world.products["tranche-v100-8g"].pk, "quantity": 1, "idempotency_key": "k"}
    response = client.post(url, data)
    assert response.status_code == 403
    assert "Acme Labs is suspended" in response.content.decode()
    assert "Contact billing support" in response.content.decode()


def test_support_is_read_only(world, support, client):
    client.force_login(support)
    assert client.get(reverse("admin:tenants_organization_changelist")).status_code == 200
    _suspend(client, world.org_a)
    assert not Organization.objects.get(pk=world.org_a.pk).is_suspended
    product = world.products["tranche-v100-8g"]
    change = reverse("admin:catalog_product_change", args=[product.pk])
    client.post(change, {"monthly_price": "1.00"})
    product.refresh_from_db()
    assert str(product.monthly_price) == "90.00"


def test_billing_cannot_touch_passwords(world, billing, client):
    client.force_login(billing)
    url = reverse("admin:auth_user_password_change", args=[world.owner.pk])
    assert client.get(url).status_code == 403


def test_status_not_editable_by_hand(world, billing, client):
    client.force_login(billing)
    url = reverse("admin:tenants_organization_change", args=[world.org_a.pk])
    client.post(url, {"name": "Acme Labs", "status": "suspended"})
    assert not Organization.objects.get(pk=world.org_a.pk).is_suspended


def test_orders_read_only_and_csv_export(world, billing, client):
    order, _ = place_order(
        membership=world.membership(world.owner),
        project=world.project_a,
        product=world.products["tranche-v100-8g"],
        quantity=2,
        idempotency_key="k",
    )
    client.force_login(billing)
    detail = client.get(reverse("admin:orders_order_change", args=[order.pk]))
    assert detail.status_code == 200
    assert b"pending" in detail.content
    response = client.post(
        reverse("admin:orders_order_changelist"),
        {"action": "export_csv", "_selected_action": [order.pk]},
    )
    lines = response.content.decode().splitlines()
    assert lines[0].startswith("id,organization,project,device_class")
    assert "tranche-v100-8g,buy,0,2,pending" in lines[1]
    subs = client.post(
        reverse("admin:orders_subscription_changelist"),
        {"action": "export_csv", "_selected_action": [order.subscription_id]},
    )
    assert "tranche-v100-8g,2,90.00,180.00,EUR" in subs.content.decode()
    audit = client.get(reverse("admin:audit_auditlog_changelist"), {"q": "order.buy"})
    assert audit.status_code == 200
    assert b"order.buy" in audit.content
