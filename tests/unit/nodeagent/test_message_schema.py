"""The agent's real messages (its collector's sample, framed by its stream) validate against the
one schema the portal checks them with, and every bound the portal enforces is a column's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeagent.checkpoint import Checkpoint, PreparedClaim, PreparedDevice
from nodeagent.status import Collector
from nodeagent.stream import StatusStream
from tests.helpers.gpus import NODE, v100
from tranche.agent_protocol import (
    MessageRejectedError,
    PodReport,
    StatusFrame,
    fields_of,
    parse_status,
)

GIB = 1024**3


def _collector(tmp_path: Path) -> Collector:
    gpu = v100(0)
    checkpoint = Checkpoint(tmp_path / "checkpoint.json")
    device = PreparedDevice("gpu", NODE, "gpu-0", gpu.uuid, "share-1", 8 * GIB, 25, "cdi-1")
    checkpoint.put(
        PreparedClaim(
            uid="claim-1",
            namespace="acme-ml",
            name="pod-a-gpu",
            devices=(device,),
            config_path=str(tmp_path / "slice.conf"),
            cdi_path=str(tmp_path / "cdi.json"),
            region_dir=str(tmp_path / "region"),  # no region yet: before the first GPU call
            pods=("acme-ml/pod-a/uid-a",),
        )
    )
    return Collector(NODE, checkpoint, [gpu])


def test_the_agents_messages_validate_against_the_schema(tmp_path: Path) -> None:
    stream = StatusStream("ws://portal.invalid/ws/agent/", NODE, "token")
    gpus, pods = _collector(tmp_path).collect()
    stream.offer(gpus, pods)
    text = stream.next_frame()
    stream.offer(gpus, {})  # the pod went away: a `removed` entry
    first, second = (parse_status(t, None, NODE) for t in (text, stream.next_frame()))
    assert [p["pod"] for p in first.pods] == ["pod-a"]
    assert first.pods[0]["memory_limit_bytes"] == 8 * GIB
    assert second.removed == [{"namespace": "acme-ml", "pod": "pod-a"}]
    assert set(json.loads(text)) == set(fields_of(StatusFrame)) - {"findings"}


def test_every_pod_field_lands_in_a_column_at_least_as_large() -> None:
    from django.apps import apps

    model = apps.get_model("agents", "PodSliceStatus")
    for name, rule in fields_of(PodReport).items():
        column = model._meta.get_field(rule.column or name)
        if hasattr(rule, "max_length"):
            assert column.max_length >= rule.max_length, name


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"uid": "u" * 65}, "pods[0].uid"),
        ({"processes": 2**31}, "pods[0].processes"),
        ({"pod": "a\x00b"}, "pods[0].pod"),
        ({"compute_target_percent": 101}, "pods[0].compute_target_percent"),
    ],
)
def test_out_of_bounds_pod_fields_are_refused_naming_the_field(
    tmp_path: Path, change: dict, field: str
) -> None:
    stream = StatusStream("ws://portal.invalid/ws/agent/", NODE, "token")
    gpus, pods = _collector(tmp_path).collect()
    stream.offer(gpus, {k: {**p, **change} for k, p in pods.items()})
    with pytest.raises(MessageRejectedError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_status(stream.next_frame(), None, NODE)


def test_findings_are_optional_typed_and_bounded(tmp_path: Path) -> None:
    """An agent from before findings (no `findings` key) stays valid; the agent's own findings
    validate; an unknown kind or an over-long detail is refused naming the field."""
    collector = _collector(tmp_path)
    collector.report("nvml-disagrees", "acme-ml", "pod-a", "NVML sees more " * 100)
    stream = StatusStream("ws://portal.invalid/ws/agent/", NODE, "token")
    gpus, pods = collector.collect()
    stream.offer(gpus, pods, collector.take_findings())
    text = stream.next_frame()
    msg = parse_status(text, None, NODE)
    (finding,) = msg.findings
    assert finding["kind"] == "nvml-disagrees"
    assert len(finding["detail"]) == 500  # cut to its bound by the agent, not refused
    old = json.loads(text)
    del old["findings"]
    assert parse_status(json.dumps(old), None, NODE).findings == []
    bad = json.loads(text)
    bad["findings"][0]["kind"] = "everything-fine"
    with pytest.raises(MessageRejectedError, match=r"findings\[0\]\.kind must be 'backstop"):
        parse_status(json.dumps(bad), None, NODE)
    bad["findings"][0] |= {"kind": "prepare-failed", "detail": "x" * 501}
    with pytest.raises(
        MessageRejectedError, match=r"findings\[0\]\.detail must be a str of 1\.\.500"
    ):
        parse_status(json.dumps(bad), None, NODE)
