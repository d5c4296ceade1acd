"""Tenant billing pages: figures, documents, and isolation between organizations."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.urls import reverse
from django.utils import timezone

from portal.billing import services
from tests.integration.billing.helpers import held_claim, place_at

CLASS = "tranche-v100-16g"


def test_month_to_date_figures(world, client_of) -> None:
    now = timezone.now()
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    product = world.products[CLASS]
    place_at(world.membership(world.owner), world.project_a, product, 2, start)
    held_claim(world.project_a, product, "c1", start, start + timedelta(hours=1), name="c1")
    body = client_of(world.owner).get(reverse("billing", args=[world.org_a.pk])).content.decode()
    hours = int((now - start).total_seconds() // 3600) + 1
    assert f"<td>{2 * hours}</td><td>1.00</td>" in body  # entitled vs used slice-hours
    assert "per hour" in body
    rate = (
        product.monthly_price
        * 2
        / (24 * ((start + timedelta(days=32)).replace(day=1) - start).days)
    ).quantize(Decimal("0.01"))
    assert f"{rate} EUR per hour" in body


def _november_invoice(world):
    """Organization A's November 2026 invoice for one slice ordered on 3 November."""
    place_at(
        world.membership(world.owner),
        world.project_a,
        world.products[CLASS],
        1,
        datetime(2026, 11, 3, tzinfo=UTC),
    )
    invoice, _ = services.generate_invoice(world.org_a, 2026, 11)
    return invoice


def test_invoice_download_and_isolation(world, client_of) -> None:
    invoice = _november_invoice(world)
    note = services.issue_credit_note(invoice, world.owner, Decimal("5.00"), "outage")
    url = reverse("invoice", args=[world.org_a.pk, invoice.pk])
    owner = client_of(world.owner)
    page = owner.get(reverse("billing", args=[world.org_a.pk])).content.decode()
    assert invoice.display_number in page
    assert note.display_number in page
    download = owner.get(url, {"download": "1"})
    assert download.status_code == 200
    assert download["Content-Disposition"] == f'attachment; filename="{invoice}.html"'
    assert str(invoice.total) in download.content.decode()
    assert "@media print" in download.content.decode()
    pdf = owner.get(url, {"format": "pdf"})
    assert pdf["Content-Type"] == "application/pdf"
    assert pdf.content.startswith(b"%PDF-")
    assert pdf["Content-Disposition"] == f'attachment; filename="{invoice}.pdf"'
    note_url = reverse("credit_note", args=[world.org_a.pk, note.pk])
    assert owner.get(note_url).status_code == 200
    assert owner.get(note_url, {"format": "pdf"}).content.startswith(b"%PDF-")
    outsider = client_of(world.outsider)
    assert outsider.get(url).status_code == 404
    assert outsider.get(note_url).status_code == 404
    assert outsider.get(reverse("billing", args=[world.org_a.pk])).status_code == 404
    # the outsider's own organization does not reach org A's invoice either
    assert outsider.get(reverse("invoice", args=[world.org_b.pk, invoice.pk])).status_code == 404


def test_catalogue_shows_the_rate_pro_rating_charges(world, client_of) -> None:
    from tranche import money, pricing

    now = timezone.now()
    hours = pricing.hours_in_month(*pricing.month_of(now))
    product = world.products[CLASS]
    body = client_of(world.owner).get(reverse("catalogue")).content.decode()
    assert f"{money.round_rate(product.monthly_price / hours)} EUR" in body
    assert f"monthly ÷ {hours} h" in body


def test_pdf_unavailable_is_a_clear_503_and_the_html_still_works(world, client_of, monkeypatch):
    """An installation without Pango (WeasyPrint fails to load it) answers with what to do."""
    invoice = _november_invoice(world)
    monkeypatch.setitem(sys.modules, "weasyprint", None)  # import fails like a missing library
    url = reverse("invoice", args=[world.org_a.pk, invoice.pk])
    owner = client_of(world.owner)
    pdf = owner.get(url, {"format": "pdf"})
    assert pdf.status_code == 503
    assert "Save as PDF" in pdf.content.decode()
    assert owner.get(url, {"download": "1"}).status_code == 200
