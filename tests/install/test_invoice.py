"""The installed portal renders an invoice PDF (WeasyPrint through the image's Pango and fonts):
200, application/pdf, and poppler's pdftoppm renders its page. Before the images carried Pango
every PDF answered 503 on an installed copy."""

from __future__ import annotations

import subprocess
import time

from tests.helpers.wait import wait_for
from tests.install.installation import NAMESPACE, RELEASE, Installation
from tests.install.tenant import Tenant, seed_catalogue

# Staff's side (docs/billing.md): the month's invoice run, here for the previous month with the
# tenant's order moved into it (the month must have ended to be invoiced).
INVOICE = """
import datetime as dt
from django.utils import timezone
from portal.billing import services
from portal.billing.tasks import previous_month
from portal.orders.models import Order
from portal.tenants.models import Organization
org = Organization.objects.get(name={org!r})
year, month = previous_month(timezone.now().year, timezone.now().month)
Order.objects.filter(project__organization=org).update(
    created_at=dt.datetime(year, month, 4, 9, tzinfo=dt.UTC))
invoice, _ = services.generate_invoice(org, year, month)
print(org.pk, invoice.pk)
"""


def test_invoice_pdf_downloads_from_the_installed_portal(
    installation: Installation, tmp_path
) -> None:
    product_id = seed_catalogue(installation)
    tenant = Tenant(installation.url)
    org_name = f"Invoice Labs {int(time.time()) % 100000}"
    project = tenant.sign_up(f"inv{int(time.time()) % 100000}", org_name, "inference")
    order = tenant.order(project, product_id, 1)
    wait_for(lambda: tenant.order_state(order) == "Active", 120, "the order Active")
    argv = ["-n", NAMESPACE, "exec", f"deploy/{RELEASE}-portal", "--", "python3", "manage.py"]
    out = installation.kubectl(*argv, "shell", "-c", INVOICE.format(org=org_name))
    org, invoice = out.strip().splitlines()[-1].split()  # after the portal's start-up log lines
    started = time.monotonic()
    pdf = tenant.request_bytes(f"/orgs/{org}/invoices/{invoice}/?format=pdf")
    took = time.monotonic() - started
    assert pdf.status == 200, pdf.body[:500]
    assert pdf.headers["content-type"] == "application/pdf"
    assert pdf.body.startswith(b"%PDF-")
    path = tmp_path / "invoice.pdf"
    path.write_bytes(pdf.body)
    render = ["pdftoppm", "-png", "-r", "50", "-f", "1", "-l", "1", str(path), str(tmp_path / "p")]
    done = subprocess.run(render, capture_output=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    pages = list(tmp_path.glob("p*.png"))
    assert pages, "pdftoppm rendered no page"
    assert pages[0].stat().st_size > 2000  # a page with text on it, not a blank
    print(f"\ninvoice PDF from the installed portal: {len(pdf.body)} bytes in {took:.2f} s")  # noqa: T201
