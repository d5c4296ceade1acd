"""Agent messages with values the database cannot hold are refused with a reason naming the
field, and a database error while storing one message is answered as an error: the socket stays
open and the next message is stored (#14 item 5). Real ASGI stack, Redis and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest
from channels.testing import WebsocketCommunicator
from django.db import connection

from portal.agents import selectors, services
from portal.agents.models import PodSliceStatus
from portal.asgi import application
from portal.tenants.models import Organization, Project
from tests.helpers.observed import bind_pods

NODE = "kwok-gpu-0"
GIB = 1024**3
pytestmark = pytest.mark.django_db(transaction=True)


def _pod(pod: str = "train-0", **over) -> dict:
    return {
        "namespace": "acme-ml",
        "pod": pod,
        "uid": "p-1",
        "gpu_uuid": "GPU-1",
        "memory_limit_bytes": 8 * GIB,
        "memory_used_bytes": 7 * GIB,
        "rejected_allocations": 0,
        "compute_target_percent": 25,
        "compute_used_percent": 24.5,
        "throttled_seconds": 0.75,
        "processes": 1,
    } | over


def _status(seq: int, pods: list[dict], **over) -> str:
    gpu = {"uuid": "GPU-1", "name": "Tesla V100-PCIE-32GB", "memory_total_bytes": 32 * GIB,
           "memory_used_bytes": 7 * GIB}  # fmt: skip
    msg = {"type": "status", "node": NODE, "seq": seq, "ts": time.time(), "full": True,
           "dropped": 0, "gpus": [gpu], "pods": pods, "removed": []}  # fmt: skip
    return json.dumps(msg | over)


@pytest.fixture
def token() -> str:
    org = Organization.objects.create(name="Acme", slug="acme")
    project = Project.objects.create(organization=org, name="ML", slug="ml", namespace="acme-ml")
    # Play the watcher: the cluster runs these pods on NODE (the portal checks the binding).
    running = {"phase": "Running", "reason": "", "node": NODE, "uid": "p-1"}
    bind_pods(project.pk, dict.fromkeys(("train-0", "next", "explode"), running))
    return services.issue_node_token(NODE)


def _exchange(token: str, frames: list[str]) -> list[dict]:
    """Send each frame on one connection; the replies, in order (a close fails the test)."""

    async def scenario() -> list[dict]:
        headers = [(b"origin", b"http://localhost"), (b"host", b"localhost"),
                   (b"authorization", f"Bearer {token}".encode()),
                   (b"x-tranche-node", NODE.encode())]  # fmt: skip
        comm = WebsocketCommunicator(application, "/ws/agent/", headers=headers)
        connected, _ = await comm.connect()
        assert connected
        replies = []
        for text in frames:
            await comm.send_to(text_data=text)
            replies.append(json.loads(await comm.receive_from(timeout=5)))
        await comm.disconnect()
        return replies

    return asyncio.run(scenario())


def _refused_then_served(token: str, bad: str, field: str) -> None:
    refused, after = _exchange(token, [bad, _status(2, [_pod("next")])])
    assert field in refused.get("error", ""), refused
    assert refused["seq"] == 1
    assert after == {"ack": 2}, "the connection did not keep serving after the refusal"
    assert selectors.pod_status("acme-ml", "train-0") is None, "a refused message was stored"
    assert selectors.pod_status("acme-ml", "next") is not None


def test_string_longer_than_its_column_is_refused(token) -> None:
    # pod_uid is a 64-character column; 65 characters used to reach the database
    _refused_then_served(token, _status(1, [_pod(uid="u" * 65)]), "pods[0].uid")


def test_integer_over_a_32_bit_column_is_refused(token) -> None:
    _refused_then_served(token, _status(1, [_pod(processes=2**31)]), "pods[0].processes")


def test_timestamp_no_date_can_hold_is_refused(token) -> None:
    _refused_then_served(token, _status(1, [_pod()], ts=1e20), "message.ts")


def test_nul_byte_is_refused(token) -> None:
    _refused_then_served(token, _status(1, [_pod(pod="train-0\x00x")]), "pods[0].pod")
    assert "NUL" in _exchange(token, [_status(3, [_pod(gpu_uuid="GPU\x001")])])[0]["error"]


@pytest.fixture
def refusing_trigger() -> Iterator[None]:
    """A real PostgreSQL error on one row: a trigger refusing pod 'explode'."""
    table = PodSliceStatus._meta.db_table
    with connection.cursor() as cur:
        cur.execute(
            "CREATE OR REPLACE FUNCTION tranche_test_refuse() RETURNS trigger AS $$ BEGIN "
            "IF NEW.pod_name = 'explode' THEN RAISE EXCEPTION 'refused by the test trigger'; "
            "END IF; RETURN NEW; END $$ LANGUAGE plpgsql"
        )
        cur.execute(
            f"CREATE TRIGGER tranche_test_refuse BEFORE INSERT OR UPDATE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION tranche_test_refuse()"
        )
    yield
    with connection.cursor() as cur:
        cur.execute(f"DROP TRIGGER IF EXISTS tranche_test_refuse ON {table}")
        cur.execute("DROP FUNCTION IF EXISTS tranche_test_refuse()")


def test_database_error_is_answered_and_the_socket_stays_open(token, refusing_trigger) -> None:
    frames = [_status(1, [_pod(), _pod("explode")]), _status(2, [_pod("next")])]
    failed, after = _exchange(token, frames)
    assert "could not store this message" in failed.get("error", ""), failed
    assert failed["seq"] == 1
    assert after == {"ack": 2}
    # one transaction: the good pod of the failed message was not stored either
    assert selectors.pod_status("acme-ml", "train-0") is None
    assert selectors.pod_status("acme-ml", "next") is not None
