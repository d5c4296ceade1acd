"""The FOCUS 1.2 export checked against the specification twice: every rule of
focus-validator 2.2.1's model of FOCUS 1.2 (`tests/fixtures/focus/model_rules.py`: the rules the
current validator runs, read from the file it ships, under the applicability criteria the export
declares), and column by column against `tests/fixtures/focus/columns_1_2.py`, copied from the
specification, not from our code.
"""

from __future__ import annotations

import csv
import json
import re
from datetime import UTC, datetime
from decimal import Decimal
from io import StringIO

from portal.billing import services
from portal.billing.focus import APPLICABILITY, UNIT_PRICE, focus_csv
from tests.fixtures.focus import columns_1_2 as spec
from tests.fixtures.focus import model_rules
from tests.integration.billing.helpers import held_claim, place_at

DATETIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
NUMBER = re.compile(r"^-?\d+(\.\d+)?$")  # integer or decimal; no sign for positives, no commas


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def _month(world) -> None:
    a, b = world.membership(world.owner), world.membership(world.outsider)
    v8, v16, v32 = (world.products[f"tranche-v100-{s}"] for s in ("8g", "16g", "32g"))
    place_at(a, world.project_a, v16, 2, utc(2026, 11, 2, 9, 15))  # buy
    place_at(a, world.project_a, v16, 4, utc(2026, 11, 12, 0))  # resize up
    place_at(a, world.project_a, v16, 1, utc(2026, 11, 20, 18))  # resize down (credit line)
    place_at(a, world.project_a, v32, 1, utc(2026, 11, 3))
    place_at(a, world.project_a, v32, 0, utc(2026, 11, 28, 12))  # cancel
    place_at(a, world.project_a, v8, 4, utc(2026, 11, 5, 8))
    place_at(b, world.project_b, v16, 1, utc(2026, 11, 30, 23, 30))
    for n in range(2):  # two V16 (50 %) slices held to 20:30 after the 18:00 resize to 1
        held_claim(
            world.project_a,
            v16,
            f"uid-held-{n}",
            utc(2026, 11, 12, 1),
            utc(2026, 11, 20, 20, 30),
            name=f"held-{n}",
        )
    _four_quarter_slices_for_an_hour(world, v8)


def _four_quarter_slices_for_an_hour(world, v8) -> None:
    """Four 25 % slices held from 10:00 to 11:00 on Nov 6: one GPU-hour."""
    for n in range(4):
        held_claim(world.project_a, v8, f"uid-{n}", utc(2026, 11, 6, 10), utc(2026, 11, 6, 11))


def _types(row: dict[str, str], types: dict[str, tuple[str, bool]]) -> list[str]:
    """Nullability and value format of every column (data types and formats)."""
    bad = []
    for column, (kind, nullable) in types.items():
        value = row.get(column, "")
        if value == "":
            bad += [] if nullable else [f"{column} is null"]
        elif kind == "Decimal" and not NUMBER.match(value):
            bad.append(f"{column}={value!r} is not a FOCUS decimal")
        elif kind == "Date/Time" and not DATETIME.match(value):
            bad.append(f"{column}={value!r} is not YYYY-MM-DDTHH:mm:ssZ")
        elif kind == "JSON":
            json.loads(value)
    return bad


def _allowed(row: dict[str, str]) -> list[str]:
    """Allowed values, and ChargeFrequency per ChargeCategory."""
    bad = []
    category, klass, frequency = row["ChargeCategory"], row["ChargeClass"], row["ChargeFrequency"]
    checks = [
        (category in spec.CHARGE_CATEGORIES, f"ChargeCategory {category!r}"),
        (not klass or klass in spec.CHARGE_CLASSES, f"ChargeClass {klass!r}"),
        (frequency in spec.CHARGE_FREQUENCIES, f"ChargeFrequency {frequency!r}"),
        (not (category == "Purchase" and frequency == "Usage-Based"), "a Usage-Based Purchase"),
        (
            not (category in ("Tax", "Credit") and frequency == "Recurring"),
            "a Recurring tax/credit",
        ),
        (row["ServiceCategory"] in spec.SERVICE_CATEGORIES, "ServiceCategory"),
        (
            not row["PricingCategory"] or row["PricingCategory"] in spec.PRICING_CATEGORIES,
            "PricingCategory",
        ),
    ]
    bad += [message for ok, message in checks if not ok]
    return bad


def _conditional_nulls(row: dict[str, str]) -> list[str]:
    """Columns null on Tax rows, present on Usage/Purchase rows that are not corrections."""
    bad = []
    category, correction = row["ChargeCategory"], row["ChargeClass"] == "Correction"
    priced = ("PricingQuantity", "ListUnitPrice", "ContractedUnitPrice", "SkuId", "SkuPriceId")
    for column in (*priced, "PricingCategory"):
        if category == "Tax" and row[column]:
            bad.append(f"{column} on a Tax row")
        if category in ("Usage", "Purchase") and not correction and not row[column]:
            bad.append(f"{column} missing on a {category} row")
    if bool(row["PricingQuantity"]) != bool(row["PricingUnit"]):
        bad.append("PricingUnit null iff PricingQuantity null")
    if category != "Usage" and row["ConsumedQuantity"]:
        bad.append(f"ConsumedQuantity on a {category} row")
    if bool(row["ConsumedQuantity"]) != bool(row["ConsumedUnit"]):
        bad.append("ConsumedUnit null iff ConsumedQuantity null")
    return bad


def _prices(row: dict[str, str]) -> list[str]:
    """Unit prices non-negative; quantity x unit price = cost (not for corrections)."""
    bad = [
        f"{p} negative" for p in ("ListUnitPrice", "ContractedUnitPrice") if row[p].startswith("-")
    ]
    if row["PricingQuantity"] and row["ListUnitPrice"] and row["ChargeClass"] != "Correction":
        product = Decimal(row["PricingQuantity"]) * Decimal(row["ListUnitPrice"])
        if product != Decimal(row["ListCost"]):  # exactly: FOCUS defines ListCost so
            bad.append(f"PricingQuantity x ListUnitPrice {product} != ListCost {row['ListCost']}")
    return bad


def _check_row(row: dict[str, str], types: dict[str, tuple[str, bool]]) -> list[str]:
    """Every rule of the specification this row breaks."""
    return _types(row, types) + _allowed(row) + _conditional_nulls(row) + _prices(row)


def _issued_month(world):
    """The month above invoiced, an invoice corrected by a credit note, another voided and
    reissued: every kind of row the export writes."""
    _month(world)
    services.run_monthly_invoices(2026, 11)
    invoice = services.generate_invoice(world.org_a, 2026, 11)[0]  # the one the run made
    services.issue_credit_note(invoice, world.owner, Decimal("15.00"), "GPU outage on Nov 21")
    other = services.generate_invoice(world.org_b, 2026, 11)[0]
    services.void_invoice(other, world.owner, "wrong buyer address")
    corrected, created = services.generate_invoice(world.org_b, 2026, 11)
    assert created
    assert corrected.corrects_id == other.pk
    return invoice, other, corrected


def test_focus_validator_2_2_1_rules_hold(world, settings) -> None:
    """Every rule focus-validator 2.2.1 checks on FOCUS 1.2, on every row: the columns the
    declared conditions require (SkuMeter, SkuPriceDetails with SkuId/SkuPriceId), the
    recommended ones (ServiceSubcategory), unit price x quantity = cost."""
    settings.CONTROLLER_CANCEL_GRACE_SECONDS = 3600
    _issued_month(world)
    text = focus_csv(2026, 11)
    rows = list(csv.DictReader(StringIO(text)))
    header = text.splitlines()[0].split(",")
    model = model_rules.load_model()
    assert model["Details"] == {"ModelVersion": "1.2.0.1", "FOCUSVersion": "1.2"}
    validator = model_rules.Validator(model, header, rows, APPLICABILITY)
    failures = validator.run()
    assert sorted(failures) == [], failures
    required = [
        r["ValidationCriteria"]["Requirement"]["ColumnName"]
        for i, r in model["ModelRules"].items()
        if i.startswith("CostAndUsage-D-") and validator.applies(i)
        and r["ValidationCriteria"]["Requirement"].get("CheckFunction") == "ColumnPresent"
    ]  # fmt: skip
    assert {"SkuMeter", "SkuPriceDetails", "ServiceSubcategory"} <= set(required)
    assert [c for c in required if c not in header] == []
    priced = [r for r in rows if r["PricingQuantity"] and r["ChargeClass"] != "Correction"]
    assert len(priced) > 10
    for row in priced:  # exactly, at the unit price's declared 10 decimals
        quantity = Decimal(row["PricingQuantity"])
        assert Decimal(row["ListUnitPrice"]) * quantity == Decimal(row["ListCost"])
        assert Decimal(row["ContractedUnitPrice"]) * quantity == Decimal(row["ContractedCost"])
        rounding = Decimal("0.005") + quantity.copy_abs() * UNIT_PRICE / 2
        assert abs(Decimal(row["ListCost"]) - Decimal(row["BilledCost"])) <= rounding


def test_the_model_catches_what_it_should(world) -> None:
    """The evaluator is not vacuous: a row without its SkuMeter, a cost that is not unit price
    x quantity and a subcategory of another category are each named by their rule."""
    model = model_rules.load_model()
    row = {
        "ChargeCategory": "Usage", "ChargeClass": "", "SkuId": "s", "SkuMeter": "",
        "ListUnitPrice": "0.25", "PricingQuantity": "3", "ListCost": "0.76",
        "ServiceCategory": "Compute", "ServiceSubcategory": "Generative AI",
    }  # fmt: skip
    failures = model_rules.Validator(model, list(row), [row], APPLICABILITY).run()
    assert {"SkuMeter-C-005-C", "ListUnitPrice-C-010-C", "ServiceSubcategory-C-004-M"} <= set(
        failures
    )


def test_focus_1_2_export_meets_the_specification(world, settings) -> None:
    settings.CONTROLLER_CANCEL_GRACE_SECONDS = 3600
    invoice, other, corrected = _issued_month(world)

    text = focus_csv(2026, 11)
    header = text.splitlines()[0].split(",")
    rows = list(csv.DictReader(StringIO(text)))
    ids = [c[0] for c in spec.COLUMNS]
    mandatory = [c[0] for c in spec.COLUMNS if c[1] == "Mandatory"]
    assert len(mandatory) == 21
    assert [c for c in mandatory if c not in header] == []  # every mandatory column, by its ID
    custom = [c for c in header if c not in ids]
    assert all(c.startswith("x_") for c in custom), custom  # custom columns are x_-prefixed…
    assert header[-len(custom) :] == custom  # …and listed after the FOCUS columns
    types = {c[0]: (c[2], c[3]) for c in spec.COLUMNS if c[0] in header}
    failures = {i: bad for i, row in enumerate(rows) if (bad := _check_row(row, types))}
    assert failures == {}, failures

    kinds = {(r["ChargeCategory"], r["ChargeClass"], r["ChargeFrequency"]) for r in rows}
    assert kinds == {
        ("Usage", "", "Recurring"),  # the plan's slices, billed per hour held in it
        ("Usage", "", "Usage-Based"),
        ("Tax", "", "One-Time"),
        ("Credit", "Correction", "One-Time"),
        ("Tax", "Correction", "One-Time"),
        ("Usage", "Correction", "One-Time"),  # the void's reversal
    }
    # exact quantities: slice-hours are whole hours x slices, never 3.999744
    plan = [r for r in rows if r["ChargeFrequency"] == "Recurring"]
    assert all(Decimal(r["PricingQuantity"]) == int(Decimal(r["PricingQuantity"])) for r in plan)
    usage = [r for r in rows if r["ChargeFrequency"] == "Usage-Based" and r["BilledCost"] == "0.00"]
    v8 = [r for r in usage if r["SkuId"] == "tranche-v100-8g"]
    assert [(r["ConsumedQuantity"], r["ConsumedUnit"], r["x_ConsumedGpuHours"]) for r in v8] == [
        ("4.000000", "Slice-Hours", "1.000000")
    ]
    # the overage line (V16 held past 19:00 after the 18:00 resize to 1: 2 started hours, one
    # slice beyond the plan) is a Usage row costing what the invoice line bills, to the cent
    (overage,) = invoice.lines.filter(kind="overage")
    assert (overage.hours, overage.amount) == (2, Decimal("0.47"))  # 170.00 x 2 / 720
    (row,) = [r for r in rows if r["ChargeDescription"] == overage.description]
    assert (
        row["ChargeCategory"],
        row["ChargeFrequency"],
        row["ConsumedQuantity"],
        row["ConsumedUnit"],
        row["x_ConsumedGpuHours"],  # 2 slice-hours of a 50 % slice
        row["BilledCost"],
    ) == ("Usage", "Usage-Based", "2.000000", "Slice-Hours", "1.000000", "0.47")
    # org A: the invoice less the credit note; org B: the void nets to zero, the corrected bills
    own = list(csv.DictReader(StringIO(focus_csv(2026, 11, world.org_a))))
    assert {r["BillingAccountId"] for r in own} == {world.org_a.slug}
    assert sum(Decimal(r["BilledCost"]) for r in own) == invoice.total - Decimal("18.00")
    b_rows = list(csv.DictReader(StringIO(focus_csv(2026, 11, world.org_b))))
    assert {r["InvoiceId"] for r in b_rows} == {other.display_number, corrected.display_number}
    assert sum(Decimal(r["BilledCost"]) for r in b_rows) == corrected.total
    assert {r["x_Corrects"] for r in b_rows if r["InvoiceId"] == corrected.display_number} == {
        other.display_number
    }


def test_focus_columns_quantities_and_frequencies(world) -> None:
    """Item 9 alone (no void, no credit): the specification's column IDs, exact slice-hours,
    usage columns normalised to GPU-hours, tax rows One-Time."""
    a, v8 = world.membership(world.owner), world.products["tranche-v100-8g"]
    place_at(a, world.project_a, v8, 4, utc(2026, 11, 5, 8))
    _four_quarter_slices_for_an_hour(world, v8)
    services.run_monthly_invoices(2026, 11)
    text = focus_csv(2026, 11)
    header = text.splitlines()[0].split(",")
    mandatory = [c[0] for c in spec.COLUMNS if c[1] == "Mandatory"]
    assert [c for c in mandatory if c not in header] == []
    rows = list(csv.DictReader(StringIO(text)))
    (plan,) = [r for r in rows if r["ChargeFrequency"] == "Recurring"]
    hours = 720 - (4 * 24 + 8)  # from Nov 5 08:00 to the month's end
    assert plan["PricingQuantity"] == str(4 * hours)  # exact, never 4 x 3.999744
    assert plan["ConsumedQuantity"] == f"{4 * hours}.000000"
    (usage,) = [r for r in rows if r["ChargeFrequency"] == "Usage-Based"]
    assert (usage["ConsumedQuantity"], usage["x_ConsumedGpuHours"]) == ("4.000000", "1.000000")
    assert {r["ChargeFrequency"] for r in rows if r["ChargeCategory"] == "Tax"} == {"One-Time"}


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
    # a month that does not exist is refused, not answered with this month's file
    bad = client.get(reverse("admin:billing_focus"), {"year": 2026, "month": 13})
    assert bad.status_code == 400
    assert "There is no month 2026-13" in bad.content.decode()
