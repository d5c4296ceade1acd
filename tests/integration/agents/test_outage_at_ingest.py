"""A GPU failure opens its slice's outage where it arrives (issue #52, "Outages are
observations"): the agent's frame carrying a fatal XID's findings, through the ingest service
on PostgreSQL, leaves one open outage of the claim the pods share, before anything of billing
runs; a resent frame opens nothing more. The frames are ones the ingest believes (issue #45):
the node publishes the GPU, the cluster bound the pods to it, the failure is recent."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from nodeagent.checkpoint import PreparedClaim, PreparedDevice
from nodeagent.health import HealthEvent
from nodeagent.health_findings import findings_for
from nodeagent.xid import Severity
from portal.agents import services
from portal.agents.models import GpuHealthEvent
from portal.cluster.models import SliceOutage, UsageRecord
from tests.helpers.observed import bind_pods
from tranche import health_kinds
from tranche.agent_protocol import parse_status

pytestmark = pytest.mark.django_db(transaction=True)

NODE = "kwok-gpu-0"
GPU = "GPU-51a1a7ed-0000-4000-8000-000000000000"
FAILED = datetime.now(UTC).replace(microsecond=216_000) - timedelta(minutes=5)


def _frame(seq: int, findings: list[dict]) -> str:
    return json.dumps({
        "type": "status", "node": NODE, "seq": seq, "ts": FAILED.timestamp(), "full": True,
        "dropped": 0, "removed": [], "findings": findings, "pods": [],
        "gpus": [{"uuid": GPU, "name": "Tesla V100-SXM2-16GB", "memory_total_bytes": 16 << 30,
                  "memory_used_bytes": 0}],
    })  # fmt: skip


def _shared_claim(project, product, uid: str, pods: int) -> tuple[UsageRecord, PreparedClaim]:
    """A ResourceClaim `uid` (named after no pod) shared by `pods` pods: in the ledger and in
    the agent's state."""
    record = UsageRecord.objects.create(
        claim_uid=uid, claim_name=f"shared-{uid}", organization=project.organization,
        project=project, product=product, node=NODE, device="gpu-0",
        allocated_at=FAILED - timedelta(days=2), opened_by="event",
    )  # fmt: skip
    dev = PreparedDevice("gpu", NODE, "gpu-0", GPU, "", 16 << 30, 50, "")
    claim = PreparedClaim(
        uid=uid, namespace=project.namespace, name=f"shared-{uid}", devices=(dev,),
        config_path="", cdi_path="", region_dir="",
        pods=tuple(f"{project.namespace}/worker-{uid}-{i}/pod-{uid}-{i}" for i in range(pods)),
    )  # fmt: skip
    return record, claim


def _bind(project, claims: list[PreparedClaim]) -> None:
    """The cluster bound every pod of these claims to NODE (the watcher's bindings)."""
    bind_pods(project.pk, {
        ref.split("/")[1]: {"phase": "Running", "node": NODE, "uid": ref.split("/")[2]}
        for claim in claims for ref in claim.pods
    })  # fmt: skip


def _findings(claims: list[PreparedClaim]) -> list[dict]:
    """The agent's findings of a fatal XID 79 on the GPU at FAILED."""
    event = HealthEvent(FAILED.timestamp(), GPU, Severity.FATAL, "GPU has fallen off the bus", 79)
    return [
        {"kind": k, "ts": event.ts, "namespace": ns, "subject": s, "detail": d, **extra}
        for k, ns, s, d, extra in findings_for(event, NODE, claims, lambda pid: None)
    ]


def test_a_gpu_failure_opens_one_outage_of_the_shared_claim_at_ingest(world) -> None:
    project, product = world.project_a, world.products["tranche-v100-16g"]
    services.issue_node_token(NODE)
    record, claim = _shared_claim(project, product, "uid-shared", 3)
    _bind(project, [claim])
    findings = _findings([claim])
    services.record_status(NODE, parse_status(_frame(1, findings), None, NODE))

    failed = GpuHealthEvent.objects.filter(kind=health_kinds.POD_GPU_FAILED)
    assert failed.count() == 3  # each pod is told
    (outage,) = SliceOutage.objects.all()  # one slice: one outage
    assert (outage.usage_record_id, outage.project_id, outage.product_id) == (
        record.pk,
        project.pk,
        product.pk,
    )
    assert (outage.started_at, outage.ended_at) == (FAILED, None)
    assert (outage.node, outage.gpu_uuid, outage.xid) == (NODE, GPU, 79)
    assert outage.organization_id == project.organization_id

    services.record_status(NODE, parse_status(_frame(2, findings), None, NODE))  # resent
    assert SliceOutage.objects.count() == 1


def test_two_shared_claims_on_one_gpu_open_one_outage_each(world) -> None:
    """Two claims of one project on the failed GPU, each shared by two pods and named after
    none: the agent names each pod's claim, so each slice gets its outage (by the pod's name
    alone the ledger could not tell them apart, and opened none)."""
    project, product = world.project_a, world.products["tranche-v100-16g"]
    services.issue_node_token(NODE)
    (one, a), (two, b) = (_shared_claim(project, product, uid, 2) for uid in ("c-1", "c-2"))
    _bind(project, [a, b])
    services.record_status(NODE, parse_status(_frame(1, _findings([a, b])), None, NODE))
    assert sorted(SliceOutage.objects.values_list("usage_record_id", flat=True)) == [
        one.pk,
        two.pk,
    ]
