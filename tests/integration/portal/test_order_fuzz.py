"""Hypothesis fuzz of the order form: any input gets a page with a message, never a 500."""

from __future__ import annotations

from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from portal.orders.models import MAX_SLICES_PER_PRODUCT, Order

junk = st.one_of(
    st.text(max_size=300),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.sampled_from(["", " ", "1.5", "1e3", "0x10", "NaN", "-0", "٣", "1\x00", "' OR 1=1 --"]),
)
field = st.one_of(st.none(), junk)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(product=field, quantity=field, key=field, method=st.sampled_from(["get", "post"]))
def test_order_form_never_500(world, client_of, product, quantity, key, method):  # noqa: PLR0917
    client = client_of(world.owner)
    data = {
        k: v
        for k, v in {"product": product, "quantity": quantity, "idempotency_key": key}.items()
        if v is not None
    }
    data = {k: v.replace("\x00", "") for k, v in data.items()}  # the test client cannot send NUL
    url = reverse("order_confirm", args=[world.project_a.pk])
    response = getattr(client, method)(url, data)
    assert response.status_code in (200, 302, 400, 403, 409)
    if response.status_code >= 400:
        assert b'role="alert"' in response.content
    for order in Order.objects.all():
        assert 0 <= order.quantity <= MAX_SLICES_PER_PRODUCT
