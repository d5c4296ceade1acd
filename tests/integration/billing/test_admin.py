"""Billing staff's organization page and utilisation report: actions call services, Support
only reads."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.urls import reverse

from portal.audit.models import AuditLog
from portal.billing import services
from portal.billing.models import CreditNote, Invoice
from tests.helpers.factories import make_staff
from tests.integration.billing.helpers import place_at

CLASS = "tranche-v100-16g"


@pytest.fixture
def invoice(world) -> Invoice:
    place_at(
        world.membership(world.owner),
        world.project_a,
        world.products[CLASS],
        2,
        datetime(2026, 11, 5, 8, tzinfo=UTC),
    )
    return services.generate_invoice(world.org_a, 2026, 11)[0]


def test_billing_issues_credit_note_and_voids_from_org_page(world, invoice, client) -> None:
    client.force_login(make_staff("bill", "Billing"))
    url = reverse("admin:billing_organization", args=[world.org_a.pk])
    page = client.get(url)
    assert page.status_code == 200
    body = page.content.decode()
    for expected in ("alice", world.project_a.namespace, str(invoice), "Issue credit note"):
        assert expected in body
    bad = client.post(
        url,
        {"invoice": invoice.pk, "action": "credit", "amount": "abc", "reason": "x"},
        follow=True,
    )
    assert "not a number" in bad.content.decode()
    client.post(
        url, {"invoice": invoice.pk, "action": "credit", "amount": "12.50", "reason": "outage"}
    )
    note = CreditNote.objects.get()
    assert (note.net_amount, note.reason, note.invoice_id) == (
        Decimal("12.50"),
        "outage",
        invoice.pk,
    )
    assert AuditLog.objects.filter(action="credit_note.issue", actor_label="bill").exists()
    # another organization's invoice cannot be reached through this organization's page
    other = client.post(
        reverse("admin:billing_organization", args=[world.org_b.pk]),
        {"invoice": invoice.pk, "action": "paid"},
    )
    assert other.status_code == 404


def test_support_reads_but_cannot_act(world, invoice, client) -> None:
    client.force_login(make_staff("sue", "Support"))
    url = reverse("admin:billing_organization", args=[world.org_a.pk])
    assert client.get(url).status_code == 200
    assert "Issue credit note" not in client.get(url).content.decode()
    response = client.post(url, {"invoice": invoice.pk, "action": "paid"})
    assert response.status_code == 403
    invoice.refresh_from_db()
    assert invoice.state == Invoice.State.ISSUED


def test_utilisation_report(world, invoice, client) -> None:
    client.force_login(make_staff("bill", "Billing"))
    page = client.get(reverse("admin:billing_utilisation"), {"year": 2026, "month": 11})
    assert page.status_code == 200
    body = page.content.decode()
    start = body.index('<table id="utilisation">')
    body = body[start : body.index("</table>", start)]
    # 2 x 16 GiB (50 %) slices from Nov 5 08:00: 616 h x 2 = 1232 slice-h = 616 card-h sold;
    # no card is registered: idle is 0 (-616 on 083f417) and the 616 sold beyond it are shown
    assert "<td>1232</td>" in body
    assert "<td>616.00</td><td>0.00</td><td>616.00</td>" in body
    assert "-616" not in page.content.decode()
    note = page.content.decode().split('id="oversold-1">', 1)[1].split("</p>", 1)[0]
    assert "616.00 card-hours sold beyond the 0 available, so idle is 0" in note
    assert "No registered node agent reports a card of this model" in note


def test_utilisation_idle_with_a_card_registered_and_never_negative(world, invoice) -> None:
    from portal.agents.models import NodeToken
    from portal.agents.services import issue_node_token
    from portal.billing.reports import utilisation_by_model

    model = world.products[CLASS].gpu_model.name
    issue_node_token("gpu-node-1")
    NodeToken.objects.filter(node_name="gpu-node-1").update(gpus=[{"name": model}])
    [row] = utilisation_by_model(2026, 11, datetime(2026, 12, 1, tzinfo=UTC))
    # one card for November's 720 h; 616 card-h sold: 104 idle, nothing beyond
    assert (row.card_hours, row.sold_card_hours) == (Decimal(720), Decimal("616.00"))
    assert (row.idle_card_hours, row.oversold_card_hours) == (Decimal("104.00"), Decimal(0))
    NodeToken.objects.filter(node_name="gpu-node-1").update(gpus=[])
    [row] = utilisation_by_model(2026, 11, datetime(2026, 12, 1, tzinfo=UTC))
    assert (row.idle_card_hours, row.oversold_card_hours) == (Decimal(0), Decimal("616.00"))
