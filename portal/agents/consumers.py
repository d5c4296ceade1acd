"""`AgentConsumer` at /ws/agent/: the node agents' status ingest.

Authentication on connect: `Authorization: Bearer <token>` plus `X-Tranche-Node: <node>`; a
wrong or revoked token refuses the handshake. Each frame is then validated on its own: a
malformed, oversized, out-of-bounds or foreign message, and one the database refuses, is answered
with {"error", "seq"} and logged with its reason, and the connection stays open, so a bug in one
message never cuts a node's status feed.
A valid frame is answered `StatusAck`: the seq, and the pod entries refused one by one (the
others were applied); the agent keeps refused entries marked `retry` and sends them again; and
the node's GPUs support marked back in service (`agents.gpu_service.in_service_for`).
Accepted pods are published to `project.<id>` groups, ids taken from the database; a report
stored while Redis is unreachable is still acknowledged (live pages catch up on the next one).
"""

from __future__ import annotations

import json
import logging

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.db import DatabaseError
from redis.exceptions import RedisError

from portal.agents import gpu_service, services
from portal.core.groups import FLEET_GROUP, project_group
from portal.core.ratelimit import RateLimitedLog
from portal.core.request_metrics import CountedSocket, count_frame
from portal.core.sockets import DirectDispatch
from tranche.agent_protocol import InService, MessageRejectedError, StatusAck, parse_status

log = logging.getLogger("portal.agents")
REJECTIONS_LOGGED_PER_MINUTE = 10
# Refused handshakes are logged at most this many a minute per process, whoever sends them (a
# flood of bad tokens wrote a line each; a client address per key would let a spread-out one
# through).
HANDSHAKES = RateLimitedLog(log, burst=REJECTIONS_LOGGED_PER_MINUTE, period=60.0)


def _header(scope: dict, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin1").strip()
    return ""


def _record(node: str, msg) -> tuple[services.Recorded, list[InService]]:
    """Store the frame; and the node's GPUs support marked back in service, for the answer
    (read after the frame's own recovery findings settled theirs)."""
    return services.record_status(node, msg), gpu_service.in_service_for(node)


class AgentConsumer(CountedSocket, DirectDispatch, AsyncWebsocketConsumer):
    node: str = ""
    socket_kind = "agent"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # A flood of bad messages is answered one by one but logged at most 10 lines a minute
        # per connection (a reconnecting node is logged anyway, by connect).
        self.rejections = RateLimitedLog(log, burst=REJECTIONS_LOGGED_PER_MINUTE, period=60.0)

    async def connect(self) -> None:
        client = ":".join(str(x) for x in (self.scope.get("client") or ["?"]))
        node = _header(self.scope, b"x-tranche-node")
        auth = _header(self.scope, b"authorization")
        token = auth[7:] if auth.lower().startswith("bearer ") else ""
        if not node or not token:
            HANDSHAKES.warning(
                "refused handshakes",
                "agent refused from %s: missing X-Tranche-Node or Bearer token", client,
            )  # fmt: skip
            await self.close(code=4401)
            return
        row = await database_sync_to_async(services.authenticate_node)(node, token)
        if row is None:
            HANDSHAKES.warning(
                "refused handshakes",
                "agent refused from %s: wrong or revoked token for node %r", client, node,
            )  # fmt: skip
            await self.close(code=4401)
            return
        self.node = node
        await self.accept()
        log.info("agent of node %s connected from %s", node, client)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        seq = None
        try:
            msg = parse_status(text_data, bytes_data, self.node)
            seq = msg.seq
            recorded, in_service = await database_sync_to_async(_record)(self.node, msg)
        except DatabaseError as exc:
            # Nothing of the message was stored (one transaction); the socket stays open, so a
            # bad row or a database hiccup never cuts the node's feed.
            log.error("agent message %s from node %s not stored: %s", seq, self.node, exc)
            count_frame("unstored")
            reason = (
                f"the portal could not store this message ({type(exc).__name__}); nothing of it "
                "was stored: resend its entries, and the portal's log has the cause"
            )
            await self.send(json.dumps({"error": reason, "seq": seq}))
            return
        except MessageRejectedError as exc:
            if seq is None and text_data and len(text_data) < 65536:
                try:
                    seq = json.loads(text_data).get("seq")
                except (ValueError, AttributeError, RecursionError):
                    seq = None
            self.rejections.warning(
                f"node {self.node}", "agent message from node %s rejected: %s", self.node, exc
            )
            count_frame("refused")
            await self.send(json.dumps({"error": str(exc), "seq": seq}))
            return
        count_frame("accepted")
        if recorded.refused:
            self.rejections.warning(
                f"node {self.node} entries",
                "agent message %s from node %s: %d entries refused, first: %s/%s: %s",
                msg.seq, self.node, len(recorded.refused), recorded.refused[0]["namespace"],
                recorded.refused[0]["pod"], recorded.refused[0]["reason"],
            )  # fmt: skip
        if recorded.health_refused:
            first = recorded.health_refused[0]
            self.rejections.warning(
                f"node {self.node} health",
                "agent message %s from node %s: %d health findings refused, first: %s %s/%s: %s",
                msg.seq, self.node, len(recorded.health_refused), first.finding["kind"],
                first.finding["namespace"], first.finding["subject"], first.reason,
            )  # fmt: skip
        events = recorded.events
        try:
            for item in (*events, *recorded.seen):
                await self.channel_layer.group_send(project_group(item.project_id), item.event)
            # the support console follows slices, GPUs and the agent's findings (its alerts)
            if events or msg.gpus or msg.findings:
                await self.channel_layer.group_send(FLEET_GROUP, {"type": "fleet.changed"})
        except RedisError as exc:  # stored already; viewers get the next report, or a snapshot
            log.warning("live update of node %s not published (Redis: %s)", self.node, exc)
        answer = StatusAck(ack=msg.seq)
        if recorded.refused:
            answer["refused"] = recorded.refused
        if in_service:
            answer["in_service"] = in_service
        await self.send(json.dumps(answer))

    async def disconnect(self, code: int) -> None:
        if self.node:
            log.info("agent of node %s disconnected (code %s)", self.node, code)
