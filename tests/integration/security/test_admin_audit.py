"""Issue #14 item 9: price and product changes (change form and the list's inline edits) and
organization renames by staff in the admin write AuditLog rows with the values before and after."""

from __future__ import annotations

from django.urls import reverse

from portal.audit.models import AuditLog


def _form_data(client, url: str, **changes) -> dict:
    """The admin change form as a browser would post it, with `changes` applied."""
    form = client.get(url).context["adminform"].form
    data = {}
    for name, field in form.fields.items():
        value = form.initial.get(name, field.initial)
        if hasattr(value, "pk"):
            value = value.pk
        if value is True:
            value = "on"
        if value not in (None, False):
            data[name] = value
    return data | changes


def test_a_price_change_in_the_product_form_is_audited(world, billing, client):
    product = world.products["tranche-v100-8g"]
    client.force_login(billing)
    url = reverse("admin:catalog_product_change", args=[product.pk])
    old_price = str(product.monthly_price)
    assert client.post(url, _form_data(client, url, monthly_price="99.50")).status_code == 302
    row = AuditLog.objects.get(action="product.change")
    assert row.actor == billing
    assert row.object_id == str(product.pk)
    assert row.before == {"monthly_price": old_price}
    assert row.after == {"monthly_price": "99.50"}


def test_an_inline_edit_in_the_product_list_is_audited(world, billing, client):
    products = sorted(world.products.values(), key=lambda p: (p.gpu_model.name, p.memory_mib))
    client.force_login(billing)
    data = {
        "form-TOTAL_FORMS": str(len(products)),
        "form-INITIAL_FORMS": str(len(products)),
        "_save": "Save",
    }
    for i, p in enumerate(products):
        data |= {
            f"form-{i}-id": p.pk,
            f"form-{i}-monthly_price": str(p.monthly_price),
        }
        if p.sellable and i != 0:  # the first product stops being sold
            data[f"form-{i}-sellable"] = "on"
    response = client.post(reverse("admin:catalog_product_changelist"), data)
    assert response.status_code == 302
    row = AuditLog.objects.get(action="product.change")
    assert (row.object_id, row.before, row.after) == (
        str(products[0].pk),
        {"sellable": True},
        {"sellable": False},
    )


def test_an_organization_rename_is_audited(world, billing, client):
    client.force_login(billing)
    url = reverse("admin:tenants_organization_change", args=[world.org_a.pk])
    data = _form_data(client, url, name="Acme Renamed")
    data |= {
        "membership_set-TOTAL_FORMS": "0",
        "membership_set-INITIAL_FORMS": "0",
    }
    response = client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:2000]
    row = AuditLog.objects.get(action="organization.change")
    assert row.organization_id == world.org_a.pk
    assert (row.before, row.after) == ({"name": "Acme Labs"}, {"name": "Acme Renamed"})
