"""The FOCUS export of a month with buys, resizes, cancels and credits passes `focus-validator`."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from decimal import Decimal
from io import StringIO
from pathlib import Path

import focus_validator

from portal.billing import services
from portal.billing.focus import focus_csv
from tests.integration.billing.helpers import place_at

FOCUS_VERSION = "1.0"  # the newest focus-validator 1.0.0 (PyPI) validates
# focus-validator 1.0.0's rule SkuPriceId_Nullable queries `ChargeType`, the 1.0-preview name of
# ChargeCategory, which a FOCUS 1.0 file must not have: the query fails on any valid 1.0 file.
# It is skipped (reported as skipped) and the test checks our file by that rule's intent instead.
VALIDATOR_BUGS = "overrides:\n  - SkuPriceId_Nullable\n"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def _validator() -> str:
    found = shutil.which("focus-validator") or str(Path(sys.executable).parent / "focus-validator")
    assert Path(found).exists(), "focus-validator is missing: it is in requirements-dev.txt"
    return found


def test_focus_export_passes_validator(world, tmp_path) -> None:
    a, b = world.membership(world.owner), world.membership(world.outsider)
    v16, v32 = world.products["tranche-v100-16g"], world.products["tranche-v100-32g"]
    place_at(a, world.project_a, v16, 2, utc(2026, 11, 2, 9, 15))  # buy
    place_at(a, world.project_a, v16, 4, utc(2026, 11, 12, 0))  # resize up
    place_at(a, world.project_a, v16, 1, utc(2026, 11, 20, 18))  # resize down (credit line)
    place_at(a, world.project_a, v32, 1, utc(2026, 11, 3))
    place_at(a, world.project_a, v32, 0, utc(2026, 11, 28, 12))  # cancel
    place_at(b, world.project_b, v16, 1, utc(2026, 11, 30, 23, 30))
    services.run_monthly_invoices(2026, 11)
    invoice = services.generate_invoice(world.org_a, 2026, 11)[0]  # the one the run made
    services.issue_credit_note(invoice, world.owner, Decimal("15.00"), "GPU outage on Nov 21")

    platform = focus_csv(2026, 11)
    rows = list(csv.DictReader(StringIO(platform)))
    categories = {(r["ChargeCategory"], r["ChargeClass"]) for r in rows}
    assert categories == {
        ("Purchase", ""),
        ("Credit", ""),
        ("Tax", ""),
        ("Credit", "Correction"),
        ("Tax", "Correction"),
    }
    assert {r["BillingAccountId"] for r in rows} == {world.org_a.slug, world.org_b.slug}
    own = list(csv.DictReader(StringIO(focus_csv(2026, 11, world.org_a))))
    assert {r["BillingAccountId"] for r in own} == {world.org_a.slug}
    billed = sum(Decimal(r["BilledCost"]) for r in own)
    assert billed == invoice.total - Decimal("18.00")  # minus the credit note with its tax

    # SkuPriceId_Nullable's intent: every Purchase/Usage row names its SKU price
    assert all(r["SkuPriceId"] for r in rows if r["ChargeCategory"] in ("Purchase", "Usage"))

    path = tmp_path / "focus.csv"
    path.write_text(platform)
    overrides = tmp_path / "overrides.yaml"
    overrides.write_text(VALIDATOR_BUGS)
    report = tmp_path / "report"
    result = subprocess.run(
        [
            _validator(),
            "--data-file", str(path),
            "--validate-version", FOCUS_VERSION,
            "--output-type", "unittest",
            "--output-destination", str(report),
            "--override-file", str(overrides),
        ],
        # it reads its ISO 4217 list from a path relative to the working directory
        cwd=Path(focus_validator.__file__).parent.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    suites = ET.parse(report).getroot()  # noqa: S314 - the report the validator just wrote
    failures = [tc.get("name") for tc in suites.iter("testcase") if tc.find("failure") is not None]
    assert int(suites.get("tests")) > 100
    assert failures == [], failures
    assert int(suites.get("skipped")) == 1


def test_focus_downloads(world, client_of, client) -> None:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.urls import reverse

    place_at(
        world.membership(world.owner),
        world.project_a,
        world.products["tranche-v100-16g"],
        1,
        utc(2026, 11, 2),
    )
    place_at(
        world.membership(world.outsider),
        world.project_b,
        world.products["tranche-v100-16g"],
        1,
        utc(2026, 11, 2),
    )
    services.run_monthly_invoices(2026, 11)
    url = reverse("focus_export", args=[world.org_a.pk, 2026, 11])
    body = client_of(world.owner).get(url).content.decode()
    assert world.org_a.slug in body
    assert world.org_b.slug not in body
    assert client_of(world.outsider).get(url).status_code == 404
    staff = get_user_model().objects.create_user(
        username="bill", password="x-staff-1", is_staff=True
    )
    staff.groups.add(Group.objects.get(name="Billing"))
    client.force_login(staff)
    platform = client.get(reverse("admin:billing_focus"), {"year": 2026, "month": 11})
    text = platform.content.decode()
    assert world.org_a.slug in text
    assert world.org_b.slug in text
