"""Issue #14 item 4: the charge is bound to the confirmed quote. Confirm "resize 3 → 5" in one
tab, place "3 → 1" in another, then submit the first: refused as stale, nothing charged."""

from __future__ import annotations

from django.urls import reverse

from portal.orders.models import Order, Subscription
from portal.orders.services import place_order
from tests.integration.portal.confirming import confirmed_order


def test_a_stale_confirmation_gets_another_order_came_first(world, client_of):
    product = world.products["tranche-v100-8g"]
    place_order(
        membership=world.membership(world.owner),
        project=world.project_a,
        product=product,
        quantity=3,
        idempotency_key="first",
    )
    client = client_of(world.owner)
    url = reverse("order_confirm", args=[world.project_a.pk])
    tab_one = confirmed_order(client, world.project_a, product, 5, key="tab-one")
    tab_two = confirmed_order(client, world.project_a, product, 1, key="tab-two")
    assert client.post(url, tab_two).status_code == 302  # 3 → 1 placed first
    response = client.post(url, tab_one)  # the 3 → 5 confirmation is now stale
    assert response.status_code == 409
    assert "another order came first" in response.content.decode()
    assert Subscription.objects.get(project=world.project_a, product=product).quantity == 1
    assert not Order.objects.filter(idempotency_key="tab-one").exists()


def test_a_tampered_amount_is_refused(world, client_of):
    product = world.products["tranche-v100-8g"]
    client = client_of(world.owner)
    data = confirmed_order(client, world.project_a, product, 2, key="cheap")
    data["confirmed_charge"] = "0.01"
    response = client.post(reverse("order_confirm", args=[world.project_a.pk]), data)
    assert response.status_code == 409
    assert "The price changed since you confirmed" in response.content.decode()
    assert not Order.objects.exists()


def test_a_confirmation_without_the_quote_is_refused(world, client_of):
    product = world.products["tranche-v100-8g"]
    data = {"product": product.pk, "quantity": 1, "idempotency_key": "old-page"}
    response = client_of(world.owner).post(
        reverse("order_confirm", args=[world.project_a.pk]), data
    )
    assert response.status_code == 400
    assert "Reload the order page and confirm again" in response.content.decode()
    assert not Order.objects.exists()
