"""SLA credits bounded by the charge (issue #46): one outage per slice (the allocated claim)
however many pods share it, a credit never above what its slice was charged in the month, and
an invoice's credits never above its charges. The failures come as the agent reports them (its
own findings, stored by the portal's health ingest), on PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeagent.checkpoint import PreparedClaim, PreparedDevice
from nodeagent.health import HealthEvent
from nodeagent.health_findings import findings_for
from nodeagent.xid import Severity
from portal.agents.gpu_health import record_health
from portal.billing import selectors, services
from portal.cluster import outages
from portal.cluster.models import SliceOutage, UsageRecord
from tests.integration.billing.helpers import place_at
from tests.integration.billing.test_sla_credits import CLASS, GPU, NODE, _sla
from tranche import money

NOVEMBER = datetime(2026, 11, 1, tzinfo=UTC)
HOURS = 720


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def _claim(project, product, uid: str, pods: int, allocated: datetime) -> PreparedClaim:
    """One ResourceClaim (not named after any pod) shared by `pods` pods: one ledger record, one
    slice of quota, in the agent's state with every pod that reserved it."""
    UsageRecord.objects.create(
        claim_uid=uid, claim_name=f"shared-{uid}", organization=project.organization,
        project=project, product=product, node=NODE, device="gpu-0", allocated_at=allocated,
        opened_by="event",
    )  # fmt: skip
    dev = PreparedDevice("gpu", NODE, "gpu-0", GPU, "", 16 << 30, 50, "")
    names = tuple(f"{project.namespace}/worker-{uid}-{i}/pod-uid-{uid}-{i}" for i in range(pods))
    return PreparedClaim(uid=uid, namespace=project.namespace, name=f"shared-{uid}",
                         devices=(dev,), config_path="", cdi_path="", region_dir="",
                         pods=names)  # fmt: skip


def _fail(at: datetime, claims: list[PreparedClaim]) -> None:
    """The agent's fatal XID 79 on the GPU at `at`, as the ingest stores it."""
    event = HealthEvent(at.timestamp(), GPU, Severity.FATAL, "GPU has fallen off the bus", 79)
    record_health(NODE, [
        {"kind": k, "ts": event.ts, "namespace": ns, "subject": s, "detail": d, **extra}
        for k, ns, s, d, extra in findings_for(event, NODE, claims, lambda pid: None)
    ])  # fmt: skip


def test_twelve_pods_on_one_claim_earn_one_credit(world) -> None:
    """12 pods share one claim (one slice bought, one device of quota); the GPU fails and none
    is replaced: one outage and one credit, 50 % of the 170.00 slice, not 12 x -85.00."""
    product = world.products[CLASS]
    _sla(product)
    a = world.project_a
    place_at(world.membership(world.owner), a, product, 1, utc(2026, 10, 20))
    claim = _claim(a, product, "c1", 12, utc(2026, 11, 1, 8))
    _fail(utc(2026, 11, 10, 10, 42, 7), [claim])
    assert SliceOutage.objects.count() == 1  # opened by the ingest, not by a billing read
    with CaptureQueriesContext(connection) as reads:  # billing's page and preview only read
        selectors.month_to_date(world.org_a, now=utc(2026, 11, 20))
        services.preview_lines(world.org_a, 2026, 11)
    assert [q["sql"] for q in reads if not q["sql"].lstrip().startswith("SELECT")] == []
    invoice, _ = services.generate_invoice(world.org_a, 2026, 11)
    (credit,) = invoice.lines.filter(kind="sla")
    assert credit.amount == Decimal("-85.00")
    assert invoice.net_total == Decimal("85.00")
    assert SliceOutage.objects.count() == 1


def test_an_unreplaced_slice_bought_late_is_credited_at_most_its_charge(world) -> None:
    """Bought on Nov 29 at 23:00 (25 h billed: 5.90), its GPU fails at 23:30 and nothing
    replaces it: down to the month's end, 96.597 % -> 25 % of its 5.90, not of 170.00 (-42.50,
    a negative invoice)."""
    product = world.products[CLASS]
    _sla(product)
    a = world.project_a
    place_at(world.membership(world.owner), a, product, 1, utc(2026, 11, 29, 23))
    claim = _claim(a, product, "late", 1, utc(2026, 11, 29, 23, 5))
    _fail(utc(2026, 11, 29, 23, 30), [claim])
    invoice, _ = services.generate_invoice(world.org_a, 2026, 11)
    charge = sum(line.amount for line in invoice.lines.exclude(kind="sla"))
    (credit,) = invoice.lines.filter(kind="sla")
    assert charge == Decimal("5.90")  # 170.00 x 25 / 720
    assert credit.amount == Decimal("-1.48")  # 25 % of 5.902777...
    assert -credit.amount <= charge
    assert invoice.net_total == Decimal("4.42") >= 0


def test_a_plan_cancelled_after_the_failure_ends_the_outage_and_bounds_the_credit(world) -> None:
    """Bought at 09:00, failed at 10:42:07, cancelled at 20:00 with the pod never replaced: the
    slice is billed 12 h (+116.88 - 114.04 = 2.84, each line rounded); the outage ends with the
    plan (33,473 s, 98.7086 % -> 25 %), not at the month's end (50 % of a month's 170.00:
    -85.00, a negative invoice)."""
    product = world.products[CLASS]
    _sla(product)
    a, m = world.project_a, world.membership(world.owner)
    place_at(m, a, product, 1, utc(2026, 11, 10, 9))
    claim = _claim(a, product, "cancelled", 1, utc(2026, 11, 10, 9, 5))
    _fail(utc(2026, 11, 10, 10, 42, 7), [claim])
    place_at(m, a, product, 0, utc(2026, 11, 10, 20))
    UsageRecord.objects.filter(claim_uid="cancelled").update(released_at=utc(2026, 11, 10, 20))
    invoice, _ = services.generate_invoice(world.org_a, 2026, 11)
    (credit,) = invoice.lines.filter(kind="sla")
    assert "down until 2026-11-10 20:00:00 UTC (33473 s)" in credit.description
    assert credit.amount == Decimal("-0.71")  # 25 % of 2.8333...
    assert invoice.net_total == Decimal("2.13")


first_buy = st.tuples(
    st.integers(min_value=0, max_value=HOURS * 60 - 1),  # minute of November
    st.integers(min_value=1, max_value=3),  # slices
    st.integers(min_value=1, max_value=3),  # pods on each slice's claim
)
events = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=HOURS * 60 - 1),  # minutes after the first buy
        st.sampled_from(["buy", "cancel", "fail", "fail", "replace"]),
        st.integers(min_value=1, max_value=3),  # quantity bought / pods on a new claim
    ),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(first_buy, events)
def test_credits_never_exceed_charges_whatever_the_history(world, first, history) -> None:
    """Random November histories of one project: buys, cancels, GPU failures of claims shared
    by 1-3 pods, some replaced (a new claim, its pod Running), others not. Whatever happens: at
    most one credit per failed claim, the invoice's credits at most its charges, its net never
    negative."""
    product = world.products[CLASS]
    a, m = world.project_a, world.membership(world.owner)
    with transaction.atomic():
        _sla(product)
        minute, held, pods = first
        begin = NOVEMBER + timedelta(minutes=minute)
        place_at(m, a, product, held, begin)
        claims = [_claim(a, product, f"first{i}", pods, begin) for i in range(held)]
        failed: set[str] = set()
        for n, (later, what, count) in enumerate(sorted(history)):
            at = begin + timedelta(minutes=later, seconds=n + 1)
            if at >= NOVEMBER + timedelta(hours=HOURS):
                break
            if what == "buy" and count != held:
                place_at(m, a, product, count, at)
                held = count
            elif what == "cancel" and held:
                place_at(m, a, product, 0, at)
                held = 0
            elif what == "fail" and claims:
                _fail(at, claims)
                failed.update(c.uid for c in claims)
                claims = []
            elif what == "replace" and held and len(claims) < held:
                claims.append(_claim(a, product, f"c{n}", count, at))
                running = at + timedelta(minutes=count * 97)
                outages.observe_running(a.namespace, f"new-{n}", [CLASS], at, running)
        lines = services.preview_lines(world.org_a, 2026, 11)
        credits = [line.amount for line in lines if line.kind == "sla"]
        charges = money.total(line.amount for line in lines if line.kind != "sla")
        assert len(credits) <= len(failed)
        assert all(c < 0 for c in credits)
        assert -money.total(credits) <= max(charges, Decimal(0))
        assert charges + money.total(credits) >= 0
        opened = SliceOutage.objects.values_list("usage_record__claim_uid", flat=True)
        assert len(opened) == len(set(opened)) <= len(failed)
        transaction.set_rollback(True)
