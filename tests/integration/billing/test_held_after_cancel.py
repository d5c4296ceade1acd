"""Slices held past a cancel's grace period into later months are billed in those months too
(docs/billing.md, "After a cancel or decrease"), on PostgreSQL: the subscription has no order in
the later month, so all of its held slice-hours there are overage at the latest order's price."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal

from portal.billing import selectors, services
from portal.orders.selectors import quote_order
from tests.integration.billing.helpers import cancelled_but_held, place_at
from tranche import money, pricing

V16 = "tranche-v100-16g"
CENT = Decimal("0.01")


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


def _cancelled_in_october_held_into_november(world):
    """Buy on Oct 5, cancel on Oct 20 at 10:00; the claim is released only on Nov 3 at 14:30."""
    return cancelled_but_held(
        world,
        world.products[V16],
        utc(2026, 10, 5),
        utc(2026, 10, 20, 10),
        utc(2026, 11, 3, 14, 30),
    )


def test_a_claim_held_into_the_next_month_is_billed_there(world, settings) -> None:
    settings.CONTROLLER_CANCEL_GRACE_SECONDS = 3600
    cancel = _cancelled_in_october_held_into_november(world)
    hours = pricing.hours_in_month(2026, 11)
    invoice, created = services.generate_invoice(world.org_a, 2026, 11)
    assert created
    (overage,) = invoice.lines.all()
    assert overage.kind == "overage"
    held_hours = 2 * 24 + 15  # Nov 1 00:00 to Nov 3 14:30, every started hour
    assert overage.hours == held_hours
    assert overage.unit_monthly_price == cancel.unit_monthly_price
    expected = (cancel.unit_monthly_price * held_hours / hours).quantize(
        CENT, rounding=ROUND_HALF_UP
    )
    assert overage.amount == expected
    assert invoice.net_total == expected
    # October bills its own part (Oct 20 11:00 to month end) and nothing of November's
    october, _ = services.generate_invoice(world.org_a, 2026, 10)
    (held_in_october,) = october.lines.filter(kind="overage")
    assert held_in_october.hours == 13 + 11 * 24  # Oct 20 11:00-24:00, then Oct 21-31
    # the monthly run finds the cancelled subscription's organization for November too
    assert services.run_monthly_invoices(2026, 11) == {"organizations": 1, "created": 0}


def test_a_claim_held_on_only_inside_the_grace_period_bills_nothing(world, settings) -> None:
    """Cancel on Oct 31 at 23:30 with a 1 h grace; release at 00:20 on Nov 1: no November bill."""
    settings.CONTROLLER_CANCEL_GRACE_SECONDS = 3600
    cancelled_but_held(
        world,
        world.products[V16],
        utc(2026, 10, 5),
        utc(2026, 10, 31, 23, 30),
        utc(2026, 11, 1, 0, 20),
    )
    assert services.generate_invoice(world.org_a, 2026, 11) == (None, False)


def test_the_billing_page_counts_the_held_slices_of_a_cancelled_subscription(
    world, settings
) -> None:
    settings.CONTROLLER_CANCEL_GRACE_SECONDS = 3600
    cancel = _cancelled_in_october_held_into_november(world)
    (line,) = selectors.month_to_date(world.org_a, now=utc(2026, 11, 2, 12, 30))
    # Nov 1 00:00 to Nov 2 12:30: 37 started hours, the claim still held
    expected = (cancel.unit_monthly_price * 37 / 720).quantize(CENT, rounding=ROUND_HALF_UP)
    assert line.held_now == 0
    assert line.cost_so_far == expected
    assert line.projected == expected


def test_a_quote_after_overage_adds_the_tax_the_invoice_adds(world, settings) -> None:
    """The quote's tax is the invoice's tax over the invoice's own lines, overage included.

    Nov 5 buy 1 x V16, Nov 10 10:00 cancel, claim held to 14:30: 4 slice-hours of overage
    (0.94) beside 30.93 of priced lines. A V8 bought on Nov 20 at 01:15 adds 32.88 net; at 20 %
    the invoice's tax grows 6.37 → 12.95 (+6.58), where a tax over the priced lines alone
    (30.93 → 63.81) would grow 6.19 → 12.76 (+6.57): a cent off."""
    settings.CONTROLLER_CANCEL_GRACE_SECONDS = 3600
    v16, v8 = world.products[V16], world.products["tranche-v100-8g"]
    cancelled_but_held(
        world, v16, utc(2026, 11, 5), utc(2026, 11, 10, 10), utc(2026, 11, 10, 14, 30)
    )
    m = world.membership(world.owner)
    at = utc(2026, 11, 20, 1, 15)
    quote = quote_order(world.project_a, v8, 1, now=at)
    order = place_at(m, world.project_a, v8, 1, at)  # what the order page shows
    assert (order.prorata_charge, order.prorata_tax) == (quote.prorata_charge, quote.prorata_tax)
    invoice, _ = services.generate_invoice(world.org_a, 2026, 11)
    assert invoice.lines.filter(kind="overage").get().amount == Decimal("0.94")
    rate = invoice.tax_rate_percent
    net_before = invoice.net_total - quote.prorata_charge  # every other line of the invoice
    total_before = net_before + money.tax_of(net_before, rate)
    assert (quote.prorata_charge, quote.prorata_tax) == (Decimal("32.88"), Decimal("6.58"))
    assert invoice.total - total_before == quote.prorata_gross
    # the billing page at the month's last minute projects the invoice's net and so its tax
    page = selectors.month_to_date(world.org_a, now=utc(2026, 11, 30, 23, 59))
    assert money.total(line.projected for line in page) == invoice.net_total


def test_the_hour_a_cancels_grace_ends_in_is_billed_on_the_page_and_the_invoice(
    world, settings
) -> None:
    """Cancelled at 17:08:58 with the pod kept: the cancel page says billing starts 60 minutes
    after the change, so the 18:00 hour (a claim held at 18:08:58 and on) is a started hour of
    overage; the billing page at 18:09 shows it and the invoice bills it (before: neither)."""
    settings.CONTROLLER_CANCEL_GRACE_SECONDS = 3600
    cancel = cancelled_but_held(
        world, world.products[V16], utc(2026, 11, 5), utc(2026, 11, 10, 17, 8, 58),
        utc(2026, 11, 10, 18, 30),
    )  # fmt: skip
    hour = (cancel.unit_monthly_price / 720).quantize(CENT, rounding=ROUND_HALF_UP)
    (line,) = selectors.month_to_date(world.org_a, now=utc(2026, 11, 10, 18, 9))
    invoice, _ = services.generate_invoice(world.org_a, 2026, 11)
    overage = invoice.lines.get(kind="overage")
    assert (overage.hours, overage.amount) == (1, hour)
    assert line.projected == invoice.net_total
    assert line.cost_so_far == invoice.net_total
