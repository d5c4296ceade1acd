"""Downtime credited end to end on the real node (issue #34): a fatal XID injected with
`simgpu-fault` (SIMULATED) on the GPU holding two tenants' slices; the agent streams its health
findings to a served portal (the GpuHealthEvents that open each slice's outage), the watcher
feeds the claims (the metering ledger) and the pods (each replacement's Running ends its
slice's outage, at its containers' start as the cluster recorded it); each tenant's month
invoice (its lines as the month run will issue them: `services.preview_lines`, the same
`_line_rows`, since the month is still running) carries the SLA credit of the measured downtime,
to the cent."""

from __future__ import annotations

import math
from datetime import datetime
from decimal import Decimal

from django.db import connection
from django.utils import timezone
from kubernetes import client

from controller.watch import Watcher
from portal.agents import services as agent_services
from portal.billing import services
from portal.billing.models import ProductSla, SlaCreditTier
from portal.catalog.models import GpuModel, Product
from portal.catalog.seed import ensure_catalogue
from portal.cluster.models import SliceOutage
from portal.tenants.models import Membership
from tests.cluster.nodeagent.conftest import create_template
from tests.cluster.nodeagent.test_gpu_health import _deployment, _fault, _running_pod, _taints
from tests.helpers.factories import make_tenant
from tests.helpers.portal import serve_portal
from tests.helpers.skips import needs_native_sim
from tests.helpers.wait import wait_for
from tests.integration.billing.helpers import place_at
from tranche import pricing

pytestmark = [needs_native_sim]
PRICE = Decimal("123.45")  # 10 % of it is 12.345: rounded half-up once, 12.35


def _ledger() -> str:
    """What the ledger holds (a failure's context)."""
    from portal.agents.models import GpuHealthEvent
    from portal.cluster.models import UsageRecord

    return "\n".join(
        [str(list(SliceOutage.objects.values()))]
        + [
            f"{e.kind} {e.namespace}/{e.pod_name} {e.occurred_at}"
            for e in GpuHealthEvent.objects.all()
        ]
        + [
            f"{r.claim_name} {r.node} {r.allocated_at}-{r.released_at}"
            for r in UsageRecord.objects.all()
        ]
    )


def _started(api, ns: str, name: str) -> datetime:
    pod = client.CoreV1Api(api).read_namespaced_pod(name, ns)
    return max(cs.state.running.started_at for cs in pod.status.container_statuses)


def test_each_tenants_invoice_credits_the_measured_downtime(
    transactional_db, kube_cluster, real_node, product, make_namespace, *, tmp_path
) -> None:
    api, node = kube_cluster.api_client, real_node.name
    ensure_catalogue()
    sold = Product.objects.create(
        gpu_model=GpuModel.objects.get(short_name="v100"), name="V100 8 GiB (SLA test)",
        fraction_percent=25, memory_mib=8192, compute_percent=25,
        device_class=product.device_class, monthly_price=PRICE,
    )  # fmt: skip
    sla = ProductSla.objects.create(product=sold, target_percent=Decimal("100"))
    SlaCreditTier.objects.create(sla=sla, below_percent=Decimal("100"), credit_percent=10)
    now = timezone.now()
    year, month = now.year, now.month
    tenants = {}
    for n in range(2):
        ns = make_namespace()
        user, org, project = make_tenant(f"sla{n}", f"SLA tenant {n}")
        project.namespace = ns
        project.save(update_fields=["namespace"])
        membership = Membership.objects.get(user=user, organization=org)
        place_at(membership, project, sold, 1, pricing.month_start(year, month))
        create_template(api, ns, product)
        tenants[ns] = org
    token_file = tmp_path / "node-token"
    token_file.write_text(agent_services.issue_node_token(node))
    watcher = Watcher(api, flush_interval=0.3)
    with (
        serve_portal(connection.settings_dict["NAME"]) as portal,
        real_node.streaming_to(portal.url, token_file),
    ):
        watcher.start()
        try:
            for ns in tenants:
                _deployment(api, ns, product, node)
            first = {ns: wait_for(lambda ns=ns: _running_pod(api, ns), 120,
                                  real_node.log_tail) for ns in tenants}  # fmt: skip
            (device,) = {d for _, d in first.values()}
            index = int(device.removeprefix("gpu-"))
            _fault(real_node, "xid", index, 79)
            try:
                wait_for(lambda: _taints(api, node, device), 10, real_node.log_tail)
                moved = {
                    ns: wait_for(lambda ns=ns: _running_pod(api, ns, frozenset({first[ns][0]})),
                                 120, lambda ns=ns: f"{ns}'s new pod\n" + real_node.log_tail())
                    for ns in tenants
                }  # fmt: skip

                def ended() -> list[SliceOutage] | None:
                    rows = list(SliceOutage.objects.filter(ended_at__isnull=False))
                    return rows if len(rows) == 2 else None

                wait_for(ended, 30, lambda: f"both outages ended: {_ledger()}\n{portal.log_tail()}")
            finally:
                _fault(real_node, "recover", index)
            # the node is left as found: the next test's GPUs are untainted
            wait_for(lambda: not _taints(api, node, device), 30,
                     lambda: "the taint to go after recovery\n" + real_node.log_tail())  # fmt: skip
        finally:
            watcher.close()
    hours = pricing.hours_in_month(year, month)
    for ns, org in tenants.items():
        outage = SliceOutage.objects.get(project__namespace=ns)
        assert outage.pod_name == first[ns][0]
        assert outage.replacement_pod == moved[ns][0]
        # the cluster's Running time (whole seconds), or the taint's time when the replacement
        # ran within the taint's own second: an outage never ends before it began
        assert outage.ended_at == max(_started(api, ns, moved[ns][0]), outage.started_at)
        # rounded up, at least 1: the Running time has whole seconds (docs/billing.md)
        seconds = max(1, math.ceil((outage.ended_at - outage.started_at).total_seconds()))
        availability = 100 - Decimal(seconds) * 100 / Decimal(hours * 3600)
        (line,) = [x for x in services.preview_lines(org, year, month) if x.kind == "sla"]
        print(f"\n{ns}: GPU {device} tainted {outage.started_at:%H:%M:%S.%f} (XID 79), "  # noqa: T201
              f"{outage.replacement_pod} Running {outage.ended_at:%H:%M:%S}: {seconds} s down, "
              f"availability {availability:.6f} % -> credit {line.amount} of {PRICE}")  # fmt: skip
        assert line.amount == Decimal("-12.35")
        assert f"({seconds} s)" in line.description
        assert outage.started_at <= outage.ended_at  # ended in the taint's second: the taint
