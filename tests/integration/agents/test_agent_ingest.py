"""The agent websocket through the real ASGI stack, Redis channel layer and PostgreSQL:
accepted status is stored per pod and published to the project's group; a wrong token,
malformed JSON and an oversized message are each refused whole with a logged reason, another
node's pod alone (the frame's other entries applied), while the connection (and the portal)
keeps serving."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.core.management import call_command

from portal.agents import selectors, services
from portal.asgi import application
from portal.tenants.models import Organization, Project
from tests.helpers.observed import bind_pods
from tranche.agent_protocol import MAX_MESSAGE_BYTES

GIB = 1024**3
pytestmark = pytest.mark.django_db(transaction=True)


def _headers(node: str, token: str) -> list[tuple[bytes, bytes]]:
    return [
        (b"origin", b"http://localhost"),
        (b"host", b"localhost"),
        (b"authorization", f"Bearer {token}".encode()),
        (b"x-tranche-node", node.encode()),
    ]


def _pod(ns: str = "acme-ml", pod: str = "train-0", uid: str = "p-1", **over) -> dict:
    base = {
        "namespace": ns,
        "pod": pod,
        "uid": uid,
        "gpu_uuid": "GPU-1",
        "memory_limit_bytes": 8 * GIB,
        "memory_used_bytes": 7 * GIB,
        "rejected_allocations": 1,
        "compute_target_percent": 25,
        "compute_used_percent": 24.5,
        "throttled_seconds": 0.75,
        "processes": 1,
    }
    return base | over


def _status(node: str, seq: int, pods: list[dict], removed: list | None = None) -> str:
    return json.dumps(
        {
            "type": "status",
            "node": node,
            "seq": seq,
            "ts": time.time(),
            "full": True,
            "dropped": 0,
            "gpus": [
                {
                    "uuid": "GPU-1",
                    "name": "Tesla V100-PCIE-32GB",
                    "memory_total_bytes": 32 * GIB,
                    "memory_used_bytes": 7 * GIB,
                }
            ],
            "pods": pods,
            "removed": removed or [],
        }
    )


@pytest.fixture
def project() -> Project:
    org = Organization.objects.create(name="Acme", slug="acme")
    return Project.objects.create(organization=org, name="ML", slug="ml", namespace="acme-ml")


def _bind(project: Project, **pods: str) -> None:
    """Play the watcher: the cluster runs each pod (uid p-1) on the given node."""
    states = {pod: {"phase": "Running", "reason": "", "node": node, "uid": "p-1"}
              for pod, node in pods.items()}  # fmt: skip
    bind_pods(project.id, states)


@pytest.fixture
def tokens() -> dict[str, str]:
    return {n: services.issue_node_token(n) for n in ("kwok-gpu-0", "kwok-gpu-1")}


async def _connect(node: str, token: str) -> tuple[WebsocketCommunicator, bool]:
    comm = WebsocketCommunicator(application, "/ws/agent/", headers=_headers(node, token))
    connected, _ = await comm.connect()
    return comm, connected


async def _send(comm: WebsocketCommunicator, text: str) -> dict:
    await comm.send_to(text_data=text)
    return json.loads(await comm.receive_from(timeout=5))


def test_status_is_stored_and_published_to_the_project_group(project, tokens):
    _bind(project, **{"train-0": "kwok-gpu-0"})

    async def scenario() -> dict:
        layer = get_channel_layer()
        listener = await layer.new_channel()
        await layer.group_add(f"project.{project.id}", listener)
        comm, connected = await _connect("kwok-gpu-0", tokens["kwok-gpu-0"])
        assert connected
        assert await _send(comm, _status("kwok-gpu-0", 1, [_pod()])) == {"ack": 1}
        event = await asyncio.wait_for(layer.receive(listener), timeout=5)
        await comm.disconnect()
        return event

    event = asyncio.run(scenario())
    assert event["type"] == "pod.status"
    assert (event["namespace"], event["pod"], event["rejected_allocations"]) == (
        "acme-ml",
        "train-0",
        1,
    )
    row = selectors.pod_status("acme-ml", "train-0")
    assert row.project_id == project.id
    assert (row.memory_limit_bytes, row.memory_used_bytes) == (8 * GIB, 7 * GIB)
    assert row.node_name == "kwok-gpu-0"


def test_wrong_token_is_refused_with_a_log_line(project, tokens, caplog):
    async def scenario() -> bool:
        _, connected = await _connect("kwok-gpu-0", tokens["kwok-gpu-1"])
        return connected

    with caplog.at_level(logging.WARNING, logger="portal.agents"):
        assert asyncio.run(scenario()) is False
    assert "wrong or revoked token for node 'kwok-gpu-0'" in caplog.text


def test_bad_messages_are_refused_and_the_connection_keeps_serving(project, tokens, caplog):
    _bind(project, **{"train-0": "kwok-gpu-1", "own": "kwok-gpu-0"})
    huge = _status("kwok-gpu-0", 3, [_pod()]) + " " * MAX_MESSAGE_BYTES
    bad = {
        "malformed": ("{not json", "malformed JSON"),
        "oversized": (huge, f"larger than {MAX_MESSAGE_BYTES} bytes"),
        "wrong type": (_status("kwok-gpu-0", 4, [_pod(memory_used_bytes=-1)]), "non-negative"),
        "unknown ns": (_status("kwok-gpu-0", 5, [_pod(ns="other")]), "not a Tranche project"),
        "other node": (_status("kwok-gpu-0", 6, [_pod()]), "runs on node kwok-gpu-1"),
        "other name": (_status("kwok-gpu-1", 7, [_pod()]), "token is 'kwok-gpu-0'"),
    }

    async def scenario() -> dict:
        other, _ = await _connect("kwok-gpu-1", tokens["kwok-gpu-1"])
        assert await _send(other, _status("kwok-gpu-1", 1, [_pod()])) == {"ack": 1}
        comm, connected = await _connect("kwok-gpu-0", tokens["kwok-gpu-0"])
        assert connected
        replies = {name: await _send(comm, text) for name, (text, _) in bad.items()}
        # Still serving this agent and the well-behaved one.
        replies["after"] = await _send(comm, _status("kwok-gpu-0", 8, [_pod(pod="own")]))
        replies["other after"] = await _send(other, _status("kwok-gpu-1", 2, [_pod()]))
        await comm.disconnect()
        await other.disconnect()
        return replies

    with caplog.at_level(logging.WARNING, logger="portal.agents"):
        replies = asyncio.run(scenario())
    for name, (_, reason) in bad.items():
        # a whole frame is refused as an error; a foreign pod entry alone, in `refused`
        said = replies[name].get("error") or replies[name]["refused"][0]["reason"]
        assert reason in said, (name, replies[name])
        assert reason in caplog.text, name
    assert replies["after"] == {"ack": 8}
    assert replies["other after"] == {"ack": 2}
    assert selectors.pod_status("acme-ml", "train-0").node_name == "kwok-gpu-1"


def test_removed_pods_are_deleted_only_by_their_node(project, tokens):
    _bind(project, **{"train-0": "kwok-gpu-0"})

    async def scenario() -> None:
        comm, _ = await _connect("kwok-gpu-0", tokens["kwok-gpu-0"])
        await _send(comm, _status("kwok-gpu-0", 1, [_pod()]))
        gone = [{"namespace": "acme-ml", "pod": "train-0"}]
        assert await _send(comm, _status("kwok-gpu-0", 2, [], gone)) == {"ack": 2}
        await comm.disconnect()

    asyncio.run(scenario())
    assert selectors.pod_status("acme-ml", "train-0") is None


def test_token_command_writes_a_private_file_and_refuses_silent_rotation(tmp_path):
    out = tmp_path / "node.token"
    call_command("create_node_token", "kwok-gpu-9", "--output", str(out))
    token = out.read_text().strip()
    assert (out.stat().st_mode & 0o777) == 0o600
    assert services.authenticate_node("kwok-gpu-9", token) is not None
    with pytest.raises(Exception, match="already has a token"):
        call_command("create_node_token", "kwok-gpu-9")
    call_command("create_node_token", "kwok-gpu-9", "--rotate", "--output", str(out))
    assert services.authenticate_node("kwok-gpu-9", token) is None


def test_a_frame_costs_the_same_queries_for_one_pod_or_a_nodes_32(project, tokens):
    """Issue #18: the ingest runs in the thread that serves every page; a node's 32 pods were an
    update_or_create each (128 queries, ~50 ms a frame), now one upsert for the message."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tranche.agent_protocol import parse_status

    names = [f"train-{k}" for k in range(32)]
    _bind(project, **dict.fromkeys(names, "kwok-gpu-0"))
    # the process's first frame also prunes old history (then once a minute): not counted
    services.record_status("kwok-gpu-0", parse_status(_status("kwok-gpu-0", 0, []), None,
                                                      "kwok-gpu-0"))  # fmt: skip
    counts = []
    for seq, pods in enumerate((names[:1], names, names), start=1):
        frame = _status("kwok-gpu-0", seq, [_pod(pod=n, memory_used_bytes=seq * GIB) for n in pods])
        with CaptureQueriesContext(connection) as ctx:
            events = services.record_status(
                "kwok-gpu-0", parse_status(frame, None, "kwok-gpu-0")
            ).events
        counts.append(len(ctx.captured_queries))
        assert [e.event["pod"] for e in events] == pods
    assert counts[0] == counts[1] == counts[2], counts
    stored = {s.pod_name: s.memory_used_bytes for s in selectors.project_pod_statuses(project.id)}
    assert stored == dict.fromkeys(names, 3 * GIB)  # the second frame's rows were updated
    twice = [_pod(memory_used_bytes=GIB), _pod(memory_used_bytes=2 * GIB)]  # one pod, listed twice
    services.record_status("kwok-gpu-0", parse_status(_status("kwok-gpu-0", 4, twice), None,
                                                      "kwok-gpu-0"))  # fmt: skip
    assert selectors.pod_status("acme-ml", "train-0").memory_used_bytes == 2 * GIB


def test_the_same_pod_is_not_taken_over_by_another_node_even_when_bound_there(project, tokens):
    """A stale or forged binding: the stored pod (same uid) stays its first node's, and nothing
    of the refused entry is stored (the upsert leaves that row alone and names it refused)."""
    from tranche.agent_protocol import parse_status

    _bind(project, **{"train-0": "kwok-gpu-0"})
    services.record_status("kwok-gpu-0", parse_status(_status("kwok-gpu-0", 1, [_pod()]), None,
                                                      "kwok-gpu-0"))  # fmt: skip
    _bind(project, **{"train-0": "kwok-gpu-1", "train-1": "kwok-gpu-1"})
    frame = _status("kwok-gpu-1", 1, [_pod(pod="train-1"), _pod(memory_used_bytes=GIB)])
    recorded = services.record_status("kwok-gpu-1", parse_status(frame, None, "kwok-gpu-1"))
    (refused,) = recorded.refused
    assert (refused["pod"], refused["retry"]) == ("train-0", False)
    assert "runs on node kwok-gpu-0, not kwok-gpu-1" in refused["reason"]
    stored = selectors.pod_status("acme-ml", "train-0")
    assert (stored.node_name, stored.memory_used_bytes) == ("kwok-gpu-0", 7 * GIB)
    # the frame's other entry is applied on its own (issue #32)
    assert selectors.pod_status("acme-ml", "train-1").node_name == "kwok-gpu-1"
    assert [e.event["pod"] for e in recorded.events] == ["train-1"]


def test_each_entry_is_applied_on_its_own_and_refusals_are_answered(project, tokens):
    """Issue #32's phantom: a frame removing the old pod and reporting a new one the watcher has
    not bound yet. The removal is applied, the new pod refused for now (retry), and stored
    once the binding exists."""
    _bind(project, old="kwok-gpu-0")

    async def scenario() -> list[dict]:
        comm, _ = await _connect("kwok-gpu-0", tokens["kwok-gpu-0"])
        replies = [await _send(comm, _status("kwok-gpu-0", 1, [_pod(pod="old")]))]
        gone = [{"namespace": "acme-ml", "pod": "old"}]
        new = _pod(pod="new", uid="p-1")
        replies.append(await _send(comm, _status("kwok-gpu-0", 2, [new], gone)))
        _bind(project, new="kwok-gpu-0")
        replies.append(await _send(comm, _status("kwok-gpu-0", 3, [new])))
        await comm.disconnect()
        return replies

    first, mixed, later = asyncio.run(scenario())
    assert first == {"ack": 1}
    assert mixed["ack"] == 2
    (refused,) = mixed["refused"]
    assert (refused["pod"], refused["retry"]) == ("new", True)
    assert "no such pod scheduled" in refused["reason"]
    assert selectors.pod_status("acme-ml", "old") is None
    assert later == {"ack": 3}
    assert selectors.pod_status("acme-ml", "new").node_name == "kwok-gpu-0"


def test_the_live_row_says_why_the_backstop_acts_on_the_pod(project, tokens):
    """The agent's reason (PodReport.enforcement) is stored and is the row's Backstop cell on
    the live page, as sent to viewers; a report without it (the backstop let go, or an agent
    from before it) shows none."""
    _bind(project, **{"train-0": "kwok-gpu-0"})
    why = ("GPU compute held to its 25 % share until 19:04:12 UTC: the pod's processes used "
           "98 % of the GPU over 2 s, work the slice's meter could not see")  # fmt: skip

    async def scenario() -> list[dict]:
        layer = get_channel_layer()
        listener = await layer.new_channel()
        await layer.group_add(f"project.{project.id}", listener)
        comm, connected = await _connect("kwok-gpu-0", tokens["kwok-gpu-0"])
        assert connected
        events = []
        for seq, pod in enumerate([_pod(enforcement=why), _pod()], start=1):
            assert await _send(comm, _status("kwok-gpu-0", seq, [pod])) == {"ack": seq}
            event = {}
            while event.get("type") != "pod.status":  # the node's "seen" mark comes too
                event = await asyncio.wait_for(layer.receive(listener), timeout=5)
            events.append(event)
        await comm.disconnect()
        return events

    held, let_go = (json.loads(e["text"])["cells"]["backstop"] for e in asyncio.run(scenario()))
    assert held == why
    assert let_go == "—"
    assert selectors.pod_status("acme-ml", "train-0").enforcement == ""
