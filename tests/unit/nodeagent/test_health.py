"""GPU health: the XID catalogue table, the device taint it becomes, and who is told."""

from __future__ import annotations

import pytest

from nodeagent.checkpoint import PreparedClaim, PreparedDevice
from nodeagent.health import HealthEvent
from nodeagent.health_findings import findings_for
from nodeagent.slices import device_taint, render_resource_slice, spec_digest
from nodeagent.xid import LOST, Severity, classify_ecc, classify_xid
from tests.helpers.gpus import NODE


@pytest.mark.parametrize(
    ("xid", "severity", "taint"),
    [
        (48, Severity.FATAL, "xid-48"),  # double-bit ECC
        (63, Severity.FATAL, "xid-63"),  # row remapping recorded: reset needed
        (64, Severity.FATAL, "xid-64"),
        (79, Severity.FATAL, "xid-79"),  # fallen off the bus
        (94, Severity.FATAL, "xid-94"),
        (95, Severity.FATAL, "xid-95"),
        (119, Severity.FATAL, "xid-119"),
        (13, Severity.APPLICATION, ""),  # graphics engine exception: the program's fault
        (31, Severity.APPLICATION, ""),  # page fault
        (43, Severity.APPLICATION, ""),  # channel reset
        (45, Severity.APPLICATION, ""),
        (1, Severity.UNKNOWN, ""),
        (999, Severity.UNKNOWN, ""),  # NVML's "unknown XID"
    ],
)
def test_xid_catalogue(xid, severity, taint):
    verdict = classify_xid(xid)
    assert (verdict.severity, verdict.taint_value) == (severity, taint)
    assert verdict.meaning


def test_ecc_double_bit_is_fatal_single_bit_is_nothing():
    assert classify_ecc(True).severity is Severity.FATAL
    assert classify_ecc(True).taint_value == "ecc-double-bit"
    assert classify_ecc(False) is None
    assert LOST.taint_value == "gpu-lost"


def test_a_failed_gpu_is_tainted_noexecute_in_the_slice(gpus):
    taint = device_taint("xid-79", 1796121720.7)
    s = render_resource_slice(NODE, gpus, 1, taints={gpus[2].uuid: taint})
    devices = {d["name"]: d for d in s["spec"]["devices"]}
    assert devices["gpu-2"]["taints"] == [{
        "key": "tranche.dev/gpu-unhealthy", "value": "xid-79", "effect": "NoExecute",
        "timeAdded": "2026-12-01T10:42:00Z",
    }]  # fmt: skip
    assert all("taints" not in d for name, d in devices.items() if name != "gpu-2")
    # the digest changes, so the publisher writes the taint; the same taint renders the same
    assert spec_digest(s) != spec_digest(render_resource_slice(NODE, gpus, 1))
    again = render_resource_slice(NODE, gpus, 1, taints={gpus[2].uuid: taint})
    assert spec_digest(again) == spec_digest(s)


def _claim(uid: str, ns: str, pod: str, pod_uid: str, gpu_uuid: str) -> PreparedClaim:
    dev = PreparedDevice("gpu", NODE, "gpu-0", gpu_uuid, "", 8 << 30, 25, "")
    return PreparedClaim(uid=uid, namespace=ns, name=f"{pod}-gpu", devices=(dev,),
                         config_path="", cdi_path="", region_dir="",
                         pods=(f"{ns}/{pod}/{pod_uid}",))  # fmt: skip


CLAIMS = [
    _claim("c1", "team-a", "llm-a", "u-1", "GPU-0"),
    _claim("c2", "team-b", "llm-b", "u-2", "GPU-0"),
    _claim("c3", "team-c", "llm-c", "u-3", "GPU-1"),
]


def test_a_fatal_xid_tells_support_and_every_pod_on_that_gpu():
    event = HealthEvent(1796121720.0, "GPU-0", Severity.FATAL, "GPU has fallen off the bus", 79)
    found = findings_for(event, NODE, CLAIMS, lambda pid: None)
    assert [(k, ns, s) for k, ns, s, _, _ in found] == [
        ("gpu-failed", "-", "GPU-0"),
        ("pod-gpu-failed", "team-a", "llm-a"),
        ("pod-gpu-failed", "team-b", "llm-b"),
    ]
    assert "XID 79" in found[1][3]
    assert "10:42:00 UTC" in found[1][3]
    assert "Kubernetes moves your pod" in found[1][3]
    # each pod's finding names its claim (the slice whose outage it opens)
    assert [f[4] for f in found] == [
        {"gpu": "GPU-0", "xid": 79},
        {"gpu": "GPU-0", "xid": 79, "claim": "c1"},
        {"gpu": "GPU-0", "xid": 79, "claim": "c2"},
    ]


def test_an_application_xid_tells_only_the_pod_of_its_process():
    event = HealthEvent(1796121720.0, "GPU-0", Severity.APPLICATION, "page fault", 31, pid=4242)
    found = findings_for(event, NODE, CLAIMS, {4242: "u-2"}.get)
    assert [(k, ns, s) for k, ns, s, _, _ in found] == [("pod-xid", "team-b", "llm-b")]
    assert found[0][4] == {"gpu": "GPU-0", "xid": 31}
    # a process no pod owns, or none named: nobody's pod is told
    assert findings_for(event, NODE, CLAIMS, lambda pid: None) == []
    unnamed = HealthEvent(1796121720.0, "GPU-0", Severity.APPLICATION, "page fault", 31)
    assert findings_for(unnamed, NODE, CLAIMS, {4242: "u-2"}.get) == []


def test_metrics_say_which_gpu_failed_and_count_events_by_xid(gpus):
    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from nodeagent.health import HealthMonitor
    from nodeagent.metrics import SliceMetrics

    monitor = HealthMonitor(gpus)  # not started: no NVML; its state is fed as a thread would
    monitor._fail(gpus[1].uuid, classify_xid(79), 79)
    metrics = SliceMetrics(NODE)
    metrics.health = monitor
    registry = CollectorRegistry()
    registry.register(metrics)
    text = generate_latest(registry).decode()
    model = gpus[1].name
    assert (
        f'tranche_gpu_healthy{{gpu_uuid="{gpus[1].uuid}",model="{model}",node="{NODE}",'
        'reason="xid-79"} 0.0' in text
    )
    healthy = f'{{gpu_uuid="{gpus[0].uuid}",model="{model}",node="{NODE}",reason=""}} 1.0'
    assert f"tranche_gpu_healthy{healthy}" in text
    assert (
        f'tranche_gpu_health_events_total{{gpu_uuid="{gpus[1].uuid}",node="{NODE}",'
        'severity="fatal",xid="79"} 1.0' in text
    )


def test_alert_rules_read_the_series_the_agent_exports():
    import re
    from pathlib import Path

    import yaml

    rules = yaml.safe_load(
        (Path(__file__).parents[3] / "deploy/monitoring/gpu-health.rules.yaml").read_text()
    )
    exported = {"tranche_gpu_healthy", "tranche_gpu_health_events_total"}
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    assert any(e.startswith("tranche_gpu_healthy == 0") for e in exprs)
    for expr in exprs:
        names = set(re.findall(r"tranche_[a-z_]+", expr))
        assert names, expr
        assert names <= exported, expr
