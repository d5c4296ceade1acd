"""An outsider reads and changes nothing of another organization: 404, never 403."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.orders.models import Order
from portal.orders.services import place_order


@pytest.fixture
def order_a(world):
    order, _ = place_order(
        membership=world.membership(world.owner),
        project=world.project_a,
        product=world.products["tranche-v100-8g"],
        quantity=1,
        idempotency_key="a1",
    )
    return order


def _urls(world, order):
    p, pr = world.project_a.pk, world.products["tranche-v100-8g"].pk
    return [
        reverse("quota", args=[p]),
        reverse("order_form", args=[p]),
        reverse("order_confirm", args=[p]) + f"?product={pr}&quantity=1",
        reverse("order_list", args=[p]),
        reverse("order_detail", args=[p, order.pk]),
        reverse("manifest", args=[p, pr]),
        reverse("manifest_download", args=[p, pr]),
        reverse("organization", args=[world.org_a.pk]),
    ]


def test_outsider_gets_404_on_every_page(world, order_a, client_of):
    client = client_of(world.outsider)
    for url in _urls(world, order_a):
        assert client.get(url).status_code == 404, url


def test_members_reach_the_same_pages(world, order_a, client_of):
    client = client_of(world.viewer)
    for url in _urls(world, order_a):
        assert client.get(url).status_code in (200, 403), url


def test_outsider_cannot_post_orders_or_invites_or_switch(world, client_of):
    client = client_of(world.outsider)
    data = {"product": world.products["tranche-v100-8g"].pk, "quantity": 1, "idempotency_key": "x"}
    assert client.post(reverse("order_confirm", args=[world.project_a.pk]), data).status_code == 404
    invite = {"form": "invite", "email": "x@example.test", "role": "owner"}
    assert client.post(reverse("organization", args=[world.org_a.pk]), invite).status_code == 404
    assert (
        client.post(reverse("switch_project"), {"project": world.project_a.pk}).status_code == 404
    )
    assert not Order.objects.exists()


def test_order_of_other_project_is_404_even_for_its_org(world, order_a, client_of):
    url = reverse("order_detail", args=[world.project_b.pk, order_a.pk])
    assert client_of(world.outsider).get(url).status_code == 404


def test_oversized_and_anonymous_ids(world, client):
    assert client.get("/projects/99999999999999999999999/").status_code == 404
    response = client.get(reverse("quota", args=[world.project_a.pk]))
    assert response.status_code == 302
    assert "/login/" in response["Location"]
