"""Billing in the browser: a tenant downloads an invoice from the billing page; billing staff
issue a credit note from the organization page in the admin."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from playwright.sync_api import expect

from portal.billing import services
from portal.billing.models import CreditNote
from portal.catalog.seed import ensure_catalogue
from portal.orders.models import Order
from portal.orders.services import place_order
from portal.tenants.models import Membership
from tests.helpers.factories import PASSWORD, make_tenant
from tests.integration.billing.helpers import same_length_ended_month
from tranche import pricing


def _invoiced_tenant():
    products = {p.device_class: p for p in ensure_catalogue()}
    user, org, project = make_tenant("alice", "Acme Labs")
    order, _ = place_order(
        membership=Membership.objects.get(user=user),
        project=project,
        product=products["tranche-v100-16g"],
        quantity=2,
        idempotency_key=secrets.token_hex(8),
    )
    Order.objects.filter(pk=order.pk).update(created_at=datetime(2026, 11, 4, 9, tzinfo=UTC))
    invoice, _ = services.generate_invoice(org, 2026, 11)
    return user, org, invoice


def _log_in(page, username: str, password: str, path: str = "/login/") -> None:
    page.goto(path)
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


def test_tenant_downloads_invoice(new_page, transactional_db, tmp_path):
    user, _org, invoice = _invoiced_tenant()
    page = new_page()
    _log_in(page, user.username, PASSWORD)
    page.get_by_role("link", name="Acme Labs").first.click()
    page.get_by_role("link", name="Billing: costs, invoices and credit notes").click()
    expect(page.get_by_role("heading", name="Billing of Acme Labs")).to_be_visible()
    with page.expect_download() as info:
        page.get_by_role("link", name=f"Download {invoice}").click()
    download = info.value
    assert download.suggested_filename == f"{invoice}.html"
    path = tmp_path / download.suggested_filename
    download.save_as(path)
    text = path.read_text()
    assert str(invoice.total) in text
    assert "@media print" in text


def test_billing_staff_issue_credit_note(new_page, transactional_db):
    _, org, invoice = _invoiced_tenant()
    staff = get_user_model().objects.create_user(
        username="bill", password="x-staff-pass-1", is_staff=True
    )
    # a transactional test starts from an emptied database: the staff group is made here with the
    # billing permissions its migration (billing 0003) grants
    group, _ = Group.objects.get_or_create(name="Billing")
    group.permissions.add(
        *Permission.objects.filter(
            content_type__app_label="billing", codename__in=["view_invoice", "change_invoice"]
        )
    )
    staff.groups.add(group)
    page = new_page()
    _log_in(page, "bill", "x-staff-pass-1", "/admin/login/")
    page.goto(f"/admin/billing/invoice/organization/{org.pk}/")
    form = page.locator("form.credit-note")
    form.get_by_label("Credit (before tax)").fill("20.00")
    form.get_by_label("Reason").fill("Node outage on Nov 12")
    form.get_by_role("button", name="Issue credit note").click()
    expect(page.get_by_text(f"issued against {invoice}")).to_be_visible()
    note = CreditNote.objects.get()
    assert (str(note.net_amount), note.reason, note.issued_by) == (
        "20.00",
        "Node outage on Nov 12",
        staff,
    )


def test_confirm_page_gross_is_the_invoice_total(new_page, transactional_db):
    """The gross the confirm page asks for a one-order month is the invoice's total, to the cent.

    The order is confirmed now; this month cannot be invoiced before it ends, so the order is
    moved to the same hour of the latest ended month of the same length (the same price), and
    that month is invoiced."""
    products = {p.device_class: p for p in ensure_catalogue()}
    user, org, project = make_tenant("alice", "Acme Labs")
    page = new_page()
    _log_in(page, user.username, PASSWORD)
    page.goto(f"/projects/{project.pk}/order/")
    page.get_by_label("Product").select_option(str(products["tranche-v100-16g"].pk))
    page.get_by_label("Slices the project should hold").fill("1")
    page.get_by_role("button", name="Review price").click()
    gross = page.locator("#prorata-gross").inner_text()
    net = page.locator("#prorata-net").inner_text()
    button = page.get_by_role("button", name=f"Confirm and pay {gross} EUR incl. tax")
    button.click()
    expect(page.get_by_text("provisioning starts now")).to_be_visible()
    order = Order.objects.get(project=project)
    at = order.created_at.astimezone(UTC)
    y, m = same_length_ended_month(at.year, at.month)
    moved = at - pricing.month_start(at.year, at.month) + pricing.month_start(y, m)
    Order.objects.filter(pk=order.pk).update(created_at=moved)
    invoice, _ = services.generate_invoice(org, y, m)
    assert (str(invoice.total), str(invoice.net_total)) == (gross, net)
