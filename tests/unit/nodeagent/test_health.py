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
    assert [(k, ns, s) for k, ns, s, _ in found] == [
        ("gpu-failed", "-", "GPU-0"),
        ("pod-gpu-failed", "team-a", "llm-a"),
        ("pod-gpu-failed", "team-b", "llm-b"),
    ]
    assert "XID 79" in found[1][3]
    assert "10:42:00 UTC" in found[1][3]
    assert "Kubernetes moves your pod" in found[1][3]


def test_an_application_xid_tells_only_the_pod_of_its_process():
    event = HealthEvent(1796121720.0, "GPU-0", Severity.APPLICATION, "page fault", 31, pid=4242)
    found = findings_for(event, NODE, CLAIMS, {4242: "u-2"}.get)
    assert [(k, ns, s) for k, ns, s, _ in found] == [("pod-xid", "team-b", "llm-b")]
    # a process no pod owns, or none named: nobody's pod is told
    assert findings_for(event, NODE, CLAIMS, lambda pid: None) == []
    unnamed = HealthEvent(1796121720.0, "GPU-0", Severity.APPLICATION, "page fault", 31)
    assert findings_for(unnamed, NODE, CLAIMS, {4242: "u-2"}.get) == []
