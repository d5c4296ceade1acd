"""Order pages over HTTP: confirmation, double submit, bad input, roles, suspension."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.orders.models import Order
from portal.tenants.services import suspend_organization
from tests.integration.portal.confirming import confirmed_order


def _confirm_url(world):
    return reverse("order_confirm", args=[world.project_a.pk])


def test_confirmation_shows_monthly_and_prorata(world, client_of):
    product = world.products["tranche-v100-8g"]
    response = client_of(world.owner).get(
        _confirm_url(world), {"product": product.pk, "quantity": 2}
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert "180.00 EUR per month" in body
    assert "Added to this month's invoice (pro-rata)" in body
    assert not Order.objects.exists()


def test_double_submit_creates_one_order(world, client_of):
    client = client_of(world.owner)
    data = confirmed_order(
        client, world.project_a, world.products["tranche-v100-8g"], 2, key="abc123"
    )
    first = client.post(_confirm_url(world), data)
    second = client.post(_confirm_url(world), data)
    assert first.status_code == second.status_code == 302
    assert first["Location"] == second["Location"]
    assert Order.objects.count() == 1


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"product": "x", "quantity": 1}, "Product must be chosen from the list"),
        ({"product": 999999, "quantity": 1}, "This product does not exist"),
        ({"product": "PRODUCT", "quantity": "two"}, "Quantity must be a whole number"),
        ({"quantity": 1}, "Choose a product"),
        ({"product": "PRODUCT", "quantity": 17}, "At most 16 slices"),
        ({"product": "PRODUCT", "quantity": -3}, "cannot be negative"),
        ({"product": "PRODUCT", "quantity": "9" * 5000}, "Quantity must be a whole number"),
        ({"product": "PRODUCT", "quantity": "9" * 40}, "At most 16 slices"),
        ({"product": "9" * 5000, "quantity": 1}, "Product must be chosen"),
    ],
)
def test_bad_input_gets_clear_message(world, client_of, params, message):
    params = {
        k: (world.products["tranche-v100-8g"].pk if v == "PRODUCT" else v)
        for k, v in params.items()
    }
    response = client_of(world.owner).get(_confirm_url(world), params)
    assert response.status_code == 400
    assert message in response.content.decode()


def test_oversized_idempotency_key_rejected(world, client_of):
    data = {
        "product": world.products["tranche-v100-8g"].pk,
        "quantity": 1,
        "idempotency_key": "k" * 500,
    }
    response = client_of(world.owner).post(_confirm_url(world), data)
    assert response.status_code == 400
    assert "confirmation key is malformed" in response.content.decode()
    assert not Order.objects.exists()


def test_viewer_sees_why_they_cannot_order(world, client_of):
    data = {"product": world.products["tranche-v100-8g"].pk, "quantity": 1, "idempotency_key": "k"}
    response = client_of(world.viewer).post(_confirm_url(world), data)
    assert response.status_code == 403
    assert "Viewers cannot place orders" in response.content.decode()
    assert not Order.objects.exists()


def test_suspended_org_sees_suspension_message(world, client_of):
    suspend_organization(actor=None, organization_id=world.org_a.pk, reason="card declined")
    data = {"product": world.products["tranche-v100-8g"].pk, "quantity": 1, "idempotency_key": "k"}
    response = client_of(world.owner).post(_confirm_url(world), data)
    assert response.status_code == 403
    assert "is suspended (card declined)" in response.content.decode()


def test_quota_page_placeholders_and_entitlement_note(world, client_of):
    client = client_of(world.owner)
    data = confirmed_order(client, world.project_a, world.products["tranche-v100-8g"], 2, key="k")
    client.post(_confirm_url(world), data)
    body = client.get(reverse("quota", args=[world.project_a.pk])).content.decode()
    assert "entitlement, not a reservation" in body
    assert "not yet reported" in body
    assert "tranche-v100-8g" in body


def test_quota_page_says_why_an_entitlement_is_not_ready(world, client_of):
    """The controller's Ready=False message reaches the tenant, and goes once it is Ready."""
    from portal.orders.lifecycle import store_outcome
    from portal.orders.models import Subscription
    from tranche.outcome import Condition, ProjectOutcome, SubscriptionOutcome

    def set_subscription_condition(pk: int, **condition: str) -> None:
        wanted = Condition(**{"message": "", **condition})  # as the reconcile stores it
        store_outcome(ProjectOutcome(subscriptions=(SubscriptionOutcome(pk, 1, (wanted,)),)))

    client = client_of(world.owner)
    data = confirmed_order(client, world.project_a, world.products["tranche-v100-8g"], 2, key="k")
    client.post(_confirm_url(world), data)
    sub = Subscription.objects.get(project=world.project_a)
    message = "Kubernetes refused the quota: the API server was unreachable; retrying."
    set_subscription_condition(sub.pk, type="Ready", status="False", reason="ApplyFailed",
                               message=message)  # fmt: skip
    url = reverse("quota", args=[world.project_a.pk])
    assert message in client.get(url).content.decode()

    set_subscription_condition(sub.pk, type="Ready", status="True", reason="Provisioned")
    assert message not in client.get(url).content.decode()
