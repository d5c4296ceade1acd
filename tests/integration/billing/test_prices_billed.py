"""Issue #29 on PostgreSQL: the price shown is the price billed (with tax, per order, same hour),
and the month's documents follow the rules (ended months only, void then correct, fixed
currency, credit-note tax, refused bad credits, the seller on the invoice)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal
from types import SimpleNamespace

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.audit.models import AuditLog
from portal.billing import selectors, services
from portal.billing.models import BillingAccount, CreditNote, Invoice
from portal.orders.models import Order
from portal.orders.selectors import quote_order
from portal.orders.services import place_order
from portal.tenants.errors import ServiceError
from tests.helpers.factories import make_staff
from tests.integration.billing.helpers import cancelled_but_held, place_at, same_length_ended_month
from tranche import pricing

V8, V16 = "tranche-v100-8g", "tranche-v100-16g"


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


def _german(world) -> BillingAccount:
    account, _ = BillingAccount.objects.update_or_create(
        organization=world.org_a, defaults={"tax_rate_percent": Decimal("19.00")}
    )
    return account


def test_confirm_page_asks_the_gross_the_invoice_bills(world, client_of) -> None:
    """Item 1: the confirm page shows the amount with and without tax at the account's rate, and
    the invoice of that one-order month bills exactly the gross it asked for.

    The order is confirmed now; this month cannot be invoiced before it ends, so the order is
    moved to the same hour of the latest ended month of the same length (the same price)."""
    _german(world)
    client, product = client_of(world.owner), world.products[V16]
    url = reverse("order_confirm", args=[world.project_a.pk])
    page = client.get(url, {"product": product.pk, "quantity": 1}).content.decode()
    gross = re.search(r'id="prorata-gross">(-?[\d.]+)<', page)
    net = re.search(r'id="prorata-net">(-?[\d.]+)<', page)
    assert gross, "the confirm page shows no amount incl. tax"
    assert net, "the confirm page shows no amount excl. tax"
    assert f"Confirm and pay {gross[1]} EUR incl. tax" in page
    assert "19.00 %" in page  # the account's own rate, not the default
    form = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', page))
    client.post(url, form)
    order = Order.objects.get(project=world.project_a)
    at = order.created_at.astimezone(UTC)
    year, month = same_length_ended_month(at.year, at.month)
    moved = at - pricing.month_start(at.year, at.month) + pricing.month_start(year, month)
    Order.objects.filter(pk=order.pk).update(created_at=moved)
    invoice, _ = services.generate_invoice(world.org_a, year, month)
    assert (invoice.total, invoice.net_total) == (Decimal(gross[1]), Decimal(net[1]))


def test_confirmed_gross_and_net_are_the_invoice_to_the_cent(world) -> None:
    """Item 1: the quote's gross and net, at the account's own rate, are what the invoice bills."""
    _german(world)
    at = utc(2026, 11, 10, 14, 25)
    product = world.products[V16]
    quote = quote_order(world.project_a, product, 1, now=at)
    assert quote.tax_rate_percent == Decimal("19.00")
    order = place_at(world.membership(world.owner), world.project_a, product, 1, at)
    assert (order.prorata_charge, order.prorata_tax) == (quote.prorata_charge, quote.prorata_tax)
    invoice, _ = services.generate_invoice(world.org_a, 2026, 11)
    assert invoice.net_total == quote.prorata_charge
    assert invoice.tax_total == quote.prorata_tax
    assert invoice.total == quote.prorata_gross


def test_re_buy_in_the_same_hour_is_quoted_what_it_is_billed(world) -> None:
    """Item 1: buy 1, resize 2, cancel, re-buy 1 within 7 minutes: each quote, gross and net,
    is what the invoice grows by (the re-buy's hour is already billed)."""
    m, product = world.membership(world.owner), world.products[V16]
    orders = [
        place_at(m, world.project_a, product, quantity, utc(2026, 11, 10, 10, minute))
        for quantity, minute in ((1, 0), (2, 2), (0, 5), (1, 7))
    ]
    # hour 226 of 720: 493 hours from the next hour, one less than a buy at the hour's start
    assert orders[-1].prorata_charge == (product.monthly_price * 493 / 720).quantize(
        Decimal("0.01")
    )
    invoice, _ = services.generate_invoice(world.org_a, 2026, 11)
    assert invoice.net_total == sum(order.prorata_charge for order in orders)
    assert invoice.tax_total == sum(order.prorata_tax for order in orders)


def test_each_order_is_billed_at_the_price_it_was_confirmed_at(world) -> None:
    """Item 2: a price rise before a resize does not re-price the earlier buy."""
    m, product = world.membership(world.owner), world.products[V16]
    old_price = product.monthly_price
    buy = place_at(m, world.project_a, product, 1, utc(2026, 11, 10, 14, 25))
    product.monthly_price = Decimal("190.00")
    product.save()
    resize = place_at(m, world.project_a, product, 2, utc(2026, 11, 20, 0))
    assert (buy.unit_monthly_price, resize.unit_monthly_price) == (old_price, Decimal("190.00"))
    invoice, _ = services.generate_invoice(world.org_a, 2026, 11)
    lines = list(invoice.lines.order_by("period_start"))
    assert [(line.unit_monthly_price, line.amount) for line in lines] == [
        (old_price, buy.prorata_charge),
        (Decimal("190.00"), resize.prorata_charge),
    ]
    assert invoice.net_total == buy.prorata_charge + resize.prorata_charge


def test_only_ended_months_are_invoiced(world) -> None:
    """Item 4: the running and future months are refused, by the service and the monthly run."""
    year, month = pricing.month_of(timezone.now())
    later = pricing.next_month(year, month)
    place_at(
        world.membership(world.owner), world.project_a, world.products[V16], 1, utc(2026, 11, 2)
    )
    for y, mo in ((year, month), later):
        with pytest.raises(ServiceError, match="has not ended yet") as refused:
            services.generate_invoice(world.org_a, y, mo)
        assert refused.type.__name__ == "MonthNotEndedError"
        with pytest.raises(ServiceError, match="has not ended yet"):
            services.run_monthly_invoices(y, mo)
    assert not Invoice.objects.filter(year__gte=year).exists()


def test_staff_preview_then_issue_an_ended_month(world, client) -> None:
    """Items 4, 10: the admin issue page previews the lines, issues, refuses a running month."""
    order = place_at(
        world.membership(world.owner), world.project_a, world.products[V16], 1, utc(2026, 11, 2)
    )
    client.force_login(make_staff("bill", "Billing"))
    # reachable from the organization's billing page (staff had no way to invoice a period)
    org_page = client.get(reverse("admin:billing_organization", args=[world.org_a.pk]))
    link = re.search(
        r'href="([^"?]+)\?organization=\d+" id="issue-for-period"', org_page.content.decode()
    )
    assert link, "no link from the organization page to issue an invoice for a period"
    url = link[1]
    query = {"organization": world.org_a.pk, "year": 2026, "month": 11}
    preview = client.get(url, query).content.decode()
    assert str(order.prorata_charge) in preview
    assert not Invoice.objects.exists()  # a preview writes nothing
    client.post(url, query)
    invoice = Invoice.objects.get(organization=world.org_a, year=2026, month=11)
    assert invoice.state == Invoice.State.ISSUED
    year, month = pricing.month_of(timezone.now())
    running = client.get(url, {**query, "year": year, "month": month}, follow=True)
    assert "has not ended yet" in running.content.decode()
    assert Invoice.objects.count() == 1


def test_void_opens_the_month_for_a_corrected_invoice(world) -> None:
    """Item 5: after a void the month is invoiced again, referencing the voided invoice."""
    place_at(
        world.membership(world.owner), world.project_a, world.products[V16], 1, utc(2026, 11, 2)
    )
    first, _ = services.generate_invoice(world.org_a, 2026, 11)
    services.void_invoice(first, world.owner, "wrong buyer address")
    corrected, created = services.generate_invoice(world.org_a, 2026, 11)
    assert created
    assert corrected.corrects_id == first.pk
    assert corrected.number != first.number
    assert corrected.total == first.total
    again, created_again = services.generate_invoice(world.org_a, 2026, 11)
    assert (again.pk, created_again) == (corrected.pk, False)  # still one live invoice


def test_currency_is_fixed_once_invoiced(world, client) -> None:
    """Item 6: staff switching an invoiced account to USD get a form error; nothing changes."""
    place_at(
        world.membership(world.owner), world.project_a, world.products[V16], 1, utc(2026, 11, 2)
    )
    services.generate_invoice(world.org_a, 2026, 11)
    account = BillingAccount.objects.get(organization=world.org_a)
    client.force_login(make_staff("bill", "Billing"))
    url = reverse("admin:billing_billingaccount_change", args=[account.pk])
    data = {
        "legal_name": account.legal_name,
        "address": "",
        "vat_id": "",
        "email": "",
        "currency": "USD",
        "tax_rate_percent": "20.00",
    }
    page = client.post(url, data)
    assert page.status_code == 200  # the form again, with its error
    assert "The currency stays EUR" in page.content.decode()
    account.refresh_from_db()
    assert account.currency == "EUR"
    from portal.billing import accounts

    account.currency = "USD"
    with pytest.raises(ServiceError, match="does not convert"):
        accounts.update_billing_account(account, None, ["currency"])


def test_crediting_the_whole_net_credits_the_whole_tax(world) -> None:
    """Item 7: three notes crediting all of 89.13 net credit all of its 17.83 tax."""
    place_at(
        world.membership(world.owner), world.project_a, world.products[V8], 1, utc(2026, 11, 1, 7)
    )
    invoice, _ = services.generate_invoice(world.org_a, 2026, 11)
    assert (invoice.net_total, invoice.tax_total) == (Decimal("89.13"), Decimal("17.83"))
    for amount in ("29.71", "29.71", "29.71"):
        services.issue_credit_note(invoice, world.owner, Decimal(amount), "outage")
    notes = CreditNote.objects.filter(invoice=invoice)
    assert sum(n.net_amount for n in notes) == invoice.net_total
    assert sum(n.tax_amount for n in notes) == invoice.tax_total
    assert sum(n.total for n in notes) == invoice.total


@pytest.mark.parametrize("amount", ["NaN", "Infinity", "-Infinity", "0.005", "12,50"])
def test_bad_credit_amounts_are_a_form_error(world, client, amount) -> None:
    """Item 10: not a finite amount of cents: a clear error, no note, no 500."""
    place_at(
        world.membership(world.owner), world.project_a, world.products[V16], 1, utc(2026, 11, 2)
    )
    invoice, _ = services.generate_invoice(world.org_a, 2026, 11)
    client.force_login(make_staff("bill", "Billing"))
    url = reverse("admin:billing_organization", args=[world.org_a.pk])
    page = client.post(
        url,
        {"invoice": invoice.pk, "action": "credit", "amount": amount, "reason": "x"},
        follow=True,
    )
    assert page.status_code == 200
    body = page.content.decode()
    assert "not a number" in body or "more than 2 decimals" in body
    assert not CreditNote.objects.exists()


def test_invoice_needs_and_prints_the_seller_address_and_vat_id(world, settings) -> None:
    """Item 10: the seller's address and VAT id are on the invoice; without them none is issued."""
    place_at(
        world.membership(world.owner), world.project_a, world.products[V16], 1, utc(2026, 11, 2)
    )
    settings.BILLING_SELLER = {"name": "Tranche GPU Cloud", "address": "", "vat_id": ""}
    with pytest.raises(ServiceError, match="TRANCHE_SELLER_ADDRESS"):
        services.generate_invoice(world.org_a, 2026, 11)
    assert not Invoice.objects.exists()
    settings.BILLING_SELLER = {
        "name": "Tranche GPU Cloud",
        "address": "1 Rue de la Paix, Paris",
        "vat_id": "FR12345678901",
    }
    invoice, _ = services.generate_invoice(world.org_a, 2026, 11)
    assert invoice.seller["vat_id"] == "FR12345678901"
    assert AuditLog.objects.filter(action="invoice.issue", object_id=str(invoice.pk)).exists()


def test_cost_so_far_of_a_cancelled_slice_is_its_invoice(world) -> None:
    """Item 10: buy at 02:10, cancel at 03:20 (170.00/month): 0.45, as the lines bill, not 0.46."""
    m, product = world.membership(world.owner), world.products[V16]
    place_at(m, world.project_a, product, 1, utc(2026, 12, 1, 2, 10))
    place_at(m, world.project_a, product, 0, utc(2026, 12, 1, 3, 20))
    (line,) = selectors.month_to_date(world.org_a, utc(2026, 12, 1, 9, 30))
    assert line.cost_so_far == line.projected == Decimal("0.45")


def test_the_order_is_placed_in_the_hour_it_was_quoted(world, monkeypatch) -> None:
    """Item 10: a quote taken just before 11:00 and an order written just after bill one hour."""
    from portal.orders import selectors as order_selectors

    quoted, written = utc(2026, 12, 15, 10, 59, 59, 999000), utc(2026, 12, 15, 11, 0, 0, 1000)
    # the quote reads the clock first; every later read (the rows' own times) is past 11:00
    monkeypatch.setattr(order_selectors, "timezone", SimpleNamespace(now=lambda: quoted))
    monkeypatch.setattr(timezone, "now", lambda: written)
    order, _ = place_order(
        membership=world.membership(world.owner),
        project=world.project_a,
        product=world.products[V16],
        quantity=1,
        idempotency_key="quote-hour",
    )
    order.refresh_from_db()
    assert order.created_at == quoted
    hour = pricing.hour_index(order.created_at, 2026, 12)
    expected = (order.unit_monthly_price * (744 - hour) / 744).quantize(Decimal("0.01"))
    assert order.prorata_charge == expected


def _held_past_cancel(world) -> None:
    """Buy on Nov 5, cancel on Nov 10 at 10:00; the claim is released only at 14:30."""
    cancelled_but_held(
        world,
        world.products[V16],
        utc(2026, 11, 5),
        utc(2026, 11, 10, 10),
        utc(2026, 11, 10, 14, 30),
    )


def test_slices_held_past_the_grace_period_are_billed(world, settings) -> None:
    """Item 3: with a 1 h grace, hours 11:00-14:30 after a 10:00 cancel bill 4 slice-hours."""
    settings.CONTROLLER_CANCEL_GRACE_SECONDS = 3600
    _held_past_cancel(world)
    invoice, _ = services.generate_invoice(world.org_a, 2026, 11)
    (overage,) = invoice.lines.filter(kind="overage")
    assert overage.hours == 4
    assert overage.amount == (Decimal("170.00") * 4 / 720).quantize(Decimal("0.01"))
    assert invoice.net_total == sum(line.amount for line in invoice.lines.all())


def test_slices_released_within_the_grace_period_cost_nothing_more(world, settings) -> None:
    settings.CONTROLLER_CANCEL_GRACE_SECONDS = 5 * 3600
    _held_past_cancel(world)
    invoice, _ = services.generate_invoice(world.org_a, 2026, 11)
    assert not invoice.lines.filter(kind="overage").exists()
