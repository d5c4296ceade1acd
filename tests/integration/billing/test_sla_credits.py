"""SLA credits through the real month run (issue #34, "Downtime credited"): a fatal XID on a GPU
holding two tenants' slices (the agent's own findings, stored by the portal's health ingest),
each tenant's replacement pod Running at a known time (the watcher's pod hook, fed the pod as
the API server returns it) -> each slice's downtime -> each tenant's invoice carries its
product's SLA credit to the cent, in the HTML, the PDF's text and the FOCUS export; staff's
outage page shows the outage beside the credit; the SLA setting is validated and audited."""

from __future__ import annotations

import csv
import shutil
import subprocess
from datetime import UTC, datetime
from decimal import Decimal
from io import StringIO

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from controller.downtime import observe_pod
from nodeagent.checkpoint import PreparedClaim, PreparedDevice
from nodeagent.health import HealthEvent
from nodeagent.health_findings import findings_for
from nodeagent.xid import Severity
from portal.agents.gpu_health import record_health
from portal.audit.models import AuditLog
from portal.billing import services
from portal.billing.focus import focus_csv
from portal.billing.models import ProductSla, SlaCreditTier
from portal.cluster.models import SliceOutage, UsageRecord
from tests.fixtures.focus import columns_1_2 as spec
from tests.helpers.factories import make_staff
from tests.integration.billing.helpers import place_at
from tests.integration.billing.test_focus import _check_row

CLASS = "tranche-v100-16g"  # 170.00 EUR a slice-month
NODE = "kwok-gpu-0"
GPU = "GPU-51a1a7ed-0000-4000-8000-000000000000"
FAILED = datetime(2026, 11, 10, 10, 42, 7, tzinfo=UTC)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def _sla(product) -> ProductSla:
    sla = ProductSla.objects.create(product=product, target_percent=Decimal("99.5"))
    for below, credit in (("99.5", "10"), ("99", "25"), ("95", "50")):
        SlaCreditTier.objects.create(sla=sla, below_percent=below, credit_percent=credit)
    return sla


def _slice(project, product, pod: str) -> PreparedClaim:
    """The pod's claim: in the ledger (allocated on the GPU's node) and in the agent's state."""
    UsageRecord.objects.create(
        claim_uid=f"uid-{pod}", claim_name=f"{pod}-{CLASS}-x7k2p",
        organization=project.organization, project=project, product=product, node=NODE,
        device="gpu-0",
        allocated_at=utc(2026, 11, 1, 8), released_at=FAILED, opened_by="event",
    )  # fmt: skip
    dev = PreparedDevice("gpu", NODE, "gpu-0", GPU, "", 16 << 30, 50, "")
    return PreparedClaim(uid=f"uid-{pod}", namespace=project.namespace, name=f"{pod}-gpu",
                         devices=(dev,), config_path="", cdi_path="", region_dir="",
                         pods=(f"{project.namespace}/{pod}/uid-{pod}",))  # fmt: skip


def _pod(namespace: str, name: str, created: datetime, started: datetime) -> dict:
    """A Running pod as the API server returns it (only the fields the hook reads)."""
    stamp = "%Y-%m-%dT%H:%M:%SZ"
    running = {"running": {"startedAt": f"{started:{stamp}}"}}
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "creationTimestamp": f"{created:{stamp}}",
        },
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": CLASS}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "app", "state": running}]},
    }


def _pdf_text(content: bytes, tmp_path) -> str:
    if shutil.which("pdftotext") is None:
        pytest.skip("pdftotext (poppler-utils) is not installed")
    path = tmp_path / "invoice.pdf"
    path.write_bytes(content)
    out = subprocess.run(["pdftotext", "-layout", str(path), "-"], check=True, capture_output=True)
    return out.stdout.decode()


@pytest.mark.django_db(transaction=True)  # the watcher's hook closes its connection, as in a thread
def test_fatal_xid_downtime_is_credited_on_each_invoice(world, client_of, tmp_path) -> None:
    product = world.products[CLASS]
    assert product.monthly_price == Decimal("170.00")
    _sla(product)
    a, b = world.project_a, world.project_b
    place_at(world.membership(world.owner), a, product, 1, utc(2026, 10, 20))
    place_at(world.membership(world.outsider), b, product, 1, utc(2026, 10, 20))
    claims = [_slice(a, product, "llm-a"), _slice(b, product, "llm-b")]
    event = HealthEvent(FAILED.timestamp(), GPU, Severity.FATAL, "GPU has fallen off the bus", 79)
    findings = [
        {"kind": k, "ts": event.ts, "namespace": ns, "subject": s, "detail": d, **extra}
        for k, ns, s, d, extra in findings_for(event, NODE, claims, lambda pid: None)
    ]
    record_health(NODE, findings)

    # a replica of A running since before the failure ends nothing; each replacement ends one
    observe_pod("MODIFIED", _pod(a.namespace, "llm-a-old", utc(2026, 11, 1), utc(2026, 11, 10, 11)))
    observe_pod("MODIFIED", _pod(a.namespace, "llm-a-new", utc(2026, 11, 10, 10, 42, 9),
                                 utc(2026, 11, 10, 18)))  # fmt: skip
    observe_pod("MODIFIED", _pod(b.namespace, "llm-b-new", utc(2026, 11, 10, 10, 42, 9),
                                 utc(2026, 11, 10, 15, 30)))  # fmt: skip
    observe_pod(
        "MODIFIED", _pod(b.namespace, "llm-b-new", utc(2026, 11, 10, 10, 42, 9), utc(2026, 11, 11))
    )  # fmt: skip  (a later event: no change)
    outages = {o.pod_name: o for o in SliceOutage.objects.all()}
    assert set(outages) == {"llm-a", "llm-b"}
    assert (outages["llm-a"].ended_at, outages["llm-a"].replacement_pod) == (
        utc(2026, 11, 10, 18),
        "llm-a-new",
    )
    assert outages["llm-b"].ended_at == utc(2026, 11, 10, 15, 30)

    services.run_monthly_invoices(2026, 11)
    inv_a = services.generate_invoice(world.org_a, 2026, 11)[0]
    inv_b = services.generate_invoice(world.org_b, 2026, 11)[0]
    # A: 7 h 17 min 53 s down = 26,273 s of 2,592,000: 98.9864 % < 99 % -> 25 % of 170.00
    # B: 4 h 47 min 53 s down = 17,273 s: 99.3336 % < 99.5 % -> 10 % of 170.00
    for invoice, seconds, percent, credit, net, total in (
        (inv_a, 26_273, "25", "-42.50", "127.50", "153.00"),
        (inv_b, 17_273, "10", "-17.00", "153.00", "183.60"),
    ):
        (line,) = invoice.lines.filter(kind="sla")
        assert line.amount == Decimal(credit)
        assert f"({seconds} s)" in line.description
        assert f"-> {percent} % of 170.00 EUR" in line.description
        assert "XID 79" in line.description
        assert (invoice.net_total, invoice.total) == (Decimal(net), Decimal(total))
        audit = AuditLog.objects.get(action="invoice.sla_credit", object_id=str(invoice.pk))
        assert audit.after["amount"] == credit
        assert audit.after["downtime_seconds"] == seconds

        owner = world.owner if invoice is inv_a else world.outsider
        url = reverse("invoice", args=[invoice.organization_id, invoice.pk])
        html = client_of(owner).get(url).content.decode()
        assert credit in html
        assert total in html
        text = _pdf_text(client_of(owner).get(url, {"format": "pdf"}).content, tmp_path)
        assert credit in text
        assert total in text
        assert "SLA credit" in text

        rows = list(csv.DictReader(StringIO(focus_csv(2026, 11, invoice.organization))))
        (row,) = [r for r in rows if r["ChargeCategory"] == "Credit"]
        assert (row["BilledCost"], row["ChargeFrequency"], row["ChargeClass"]) == (
            credit,
            "One-Time",
            "",
        )
        header = list(rows[0])
        types = {c[0]: (c[2], c[3]) for c in spec.COLUMNS if c[0] in header}
        assert [_check_row(r, types) for r in rows] == [[] for _ in rows]
        assert sum(Decimal(r["BilledCost"]) for r in rows) == Decimal(total)

    billing = make_staff("bill", "Billing")
    # a transactional test's flush drops the groups' grants migrations made: grant it again
    billing.user_permissions.add(
        Permission.objects.get(codename="view_sliceoutage", content_type__app_label="cluster")
    )
    staff = client_of(billing)
    page = staff.get(reverse("admin:cluster_sliceoutage_changelist")).content.decode()
    assert f"-42.50 on {inv_a}" in page
    assert f"-17.00 on {inv_b}" in page
    assert GPU in page


def test_an_outage_open_at_the_month_end_counts_to_it(world) -> None:
    product = world.products[CLASS]
    _sla(product)
    a = world.project_a
    place_at(world.membership(world.owner), a, product, 1, utc(2026, 10, 20))
    claims = [_slice(a, product, "llm-a")]
    event = HealthEvent(FAILED.timestamp(), GPU, Severity.FATAL, "GPU has fallen off the bus", 79)
    record_health(NODE, [
        {"kind": k, "ts": event.ts, "namespace": ns, "subject": s, "detail": d, **extra}
        for k, ns, s, d, extra in findings_for(event, NODE, claims, lambda pid: None)
    ])  # fmt: skip
    invoice = services.generate_invoice(world.org_a, 2026, 11)[0]
    (line,) = invoice.lines.filter(kind="sla")
    assert line.amount == Decimal("-85.00")  # down 20 d 13:17:53 of 30 d: below 95 % -> 50 %
    assert "until the month's end (1775873 s)" in line.description


def test_sla_admin_validates_and_audits(world, client_of) -> None:
    product = world.products[CLASS]
    staff = make_staff("bill", "Billing")
    client = client_of(staff)
    url = reverse("admin:billing_productsla_add")
    form = {
        "product": product.pk,
        "target_percent": "99.5",
        "tiers-TOTAL_FORMS": "2",
        "tiers-INITIAL_FORMS": "0",
        "tiers-0-below_percent": "99.5",
        "tiers-0-credit_percent": "25",
        "tiers-1-below_percent": "99",
        "tiers-1-credit_percent": "10",
    }
    refused = client.post(url, form)
    assert refused.status_code == 200
    assert "a worse month must never credit less" in refused.content.decode()
    assert not ProductSla.objects.exists()
    form["tiers-0-credit_percent"], form["tiers-1-credit_percent"] = "10", "25"
    assert client.post(url, form).status_code == 302
    sla = ProductSla.objects.get(product=product)
    audit = AuditLog.objects.get(action="product_sla.create")
    assert audit.after == {
        "target_percent": "99.500",
        "tiers": [["99.500", "10.000"], ["99.000", "25.000"]],
    }
    assert audit.actor_label == "bill"
    tiers = list(sla.tiers.order_by("-below_percent"))
    change = {
        **form,
        "target_percent": "99.9",
        "tiers-INITIAL_FORMS": "2",
        "tiers-0-id": tiers[0].pk,
        "tiers-0-sla": sla.pk,
        "tiers-1-id": tiers[1].pk,
        "tiers-1-sla": sla.pk,
    }
    url = reverse("admin:billing_productsla_change", args=[sla.pk])
    refused = client.post(url, change).content.decode()
    assert "No tier starts at the target (99.9 %)" in refused  # nothing saved
    ProductSla.objects.get(pk=sla.pk, target_percent=Decimal("99.5"))
    change["tiers-0-below_percent"] = "99.9"
    assert client.post(url, change).status_code == 302
    audit = AuditLog.objects.get(action="product_sla.change")
    assert audit.before == {
        "target_percent": "99.500",
        "tiers": [["99.500", "10.000"], ["99.000", "25.000"]],
    }
    assert audit.after == {
        "target_percent": "99.900",
        "tiers": [["99.900", "10.000"], ["99.000", "25.000"]],
    }


@pytest.mark.django_db(transaction=True)  # the watcher's hook closes its connection
def test_a_second_event_in_the_replacements_running_second_opens_nothing(world) -> None:
    """XID 79, the replacement Running (whole seconds: 10:42:08 for a start at 10:42:08.x),
    then the same failure's "stops answering" event at 10:42:08.4 naming the old pod again:
    one outage, ended, not a second one open until the month's end (the fresh-clone CI's
    failure of the real-node credit test)."""
    product = world.products[CLASS]
    a = world.project_a
    place_at(world.membership(world.owner), a, product, 1, utc(2026, 10, 20))
    claim = _slice(a, product, "llm-a")
    UsageRecord.objects.filter(project=a).update(released_at=utc(2026, 11, 10, 10, 43))
    running = _pod(a.namespace, "llm-a-new", FAILED, FAILED.replace(second=8))
    later = FAILED.replace(second=8, microsecond=400_000)
    for ts, text, xid in ((FAILED, "GPU has fallen off the bus", 79),
                          (later, "GPU stopped answering NVML", None)):  # fmt: skip
        if xid is None:  # the replacement runs before the second event arrives
            observe_pod("MODIFIED", running)
        event = HealthEvent(ts.timestamp(), GPU, Severity.FATAL, text, xid)
        record_health(NODE, [
            {"kind": k, "ts": event.ts, "namespace": ns, "subject": s, "detail": d, **extra}
            for k, ns, s, d, extra in findings_for(event, NODE, [claim], lambda pid: None)
        ])  # fmt: skip
    observe_pod("MODIFIED", running)
    (outage,) = SliceOutage.objects.all()
    assert (outage.pod_name, outage.ended_at) == ("llm-a", FAILED.replace(second=8))


@pytest.mark.django_db(transaction=True)
def test_a_running_pod_with_no_outage_pending_costs_one_query(world, django_assert_num_queries):
    """The watcher calls the hook for every event of every running pod: with no open outage and
    no failure event to open one in the namespace, it asks one question and ends nothing."""
    pod = _pod(world.project_a.namespace, "llm-a", utc(2026, 11, 1), utc(2026, 11, 1, 0, 1))
    with django_assert_num_queries(1):
        observe_pod("MODIFIED", pod)
    assert not SliceOutage.objects.exists()
