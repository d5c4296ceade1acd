"""`ProjectStatusConsumer` at /ws/projects/<id>/status/: a project's pod status, live.

Authorised on connect with the page's rule (`selectors.can_watch`), and again whenever the
viewer's rights may have changed: `portal.status.signals` sends `access.changed` to the user's
group (`access.user.<id>`) on a membership added, changed or removed, a staff group or account
flag changed, and to the project's group when the project goes. A viewer who lost access is
closed with code 4403. A refused caller is accepted and closed at once with 4403 (a handshake
rejection would reach the browser as a bare 1006, and the page could not tell "no access" from
"network down"); nothing is sent first. Logging out closes the session's sockets with 4401
(`SessionBound`); a frame from the page gets one error answer, never a traceback
(`NoClientFrames`: these sockets only send).

Deliveries cost no database query and no encoding: the agent ingest publishes each pod's
display row as the page's JSON message, built once (`portal.agents.rows`), and this consumer
forwards the text. On connect the socket sends a
snapshot of every row, so a reconnecting page repairs whatever it missed while down.
"""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.contrib.auth import get_user_model

from portal.agents.events import (
    GpuHealthLiveEvent,
    NodeSeenEvent,
    PodRemovedEvent,
    PodStatusEvent,
)
from portal.cluster.services import PodClusterEvent
from portal.core.groups import FLEET_GROUP, project_group, user_access_group
from portal.core.request_metrics import CountedSocket
from portal.core.sockets import DirectDispatch, NoClientFrames, SessionBound
from portal.status import selectors

CLOSE_FORBIDDEN = 4403


def _snapshot(user_id: int | None, project_id: int) -> list[dict] | None:
    if not selectors.can_watch(user_id, project_id):
        return None
    return [row.as_json() for row in selectors.pod_rows(project_id)]


def _cluster_snapshot(project_id: int) -> list[dict]:
    return [row.as_json() for row in selectors.cluster_rows(project_id)]


def _cluster_message(project_id: int, namespace: str, name: str) -> dict:
    row = selectors.live_cluster_row(project_id, namespace, name)
    if row is None:
        return {"type": "cluster-remove", "key": f"{namespace}/{name}"}
    return {"type": "cluster-row", **row.as_json()}


class ProjectStatusConsumer(
    CountedSocket, DirectDispatch, SessionBound, NoClientFrames, AsyncJsonWebsocketConsumer
):
    socket_kind = "project"
    project_id: int | None = None
    user_id: int | None = None

    def _user_id(self) -> int | None:
        user = self.scope.get("user")
        return user.pk if getattr(user, "is_authenticated", False) else None

    async def connect(self) -> None:
        project_id = int(self.scope["url_route"]["kwargs"]["project_id"])
        self.user_id = self._user_id()
        rows = await database_sync_to_async(_snapshot)(self.user_id, project_id)
        await self.accept()
        if rows is None:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.project_id = project_id
        await self.join_session()
        await self.channel_layer.group_add(project_group(project_id), self.channel_name)
        await self.channel_layer.group_add(user_access_group(self.user_id), self.channel_name)
        cluster = await database_sync_to_async(_cluster_snapshot)(project_id)
        snapshot = {"type": "snapshot", "rows": rows}
        if cluster:  # absent means none (the page clears its cluster table)
            snapshot["cluster"] = cluster
        await self.send_json(snapshot)

    async def pod_cluster(self, event: PodClusterEvent) -> None:
        """The cluster's view of a pod changed (the watcher stored it): send its row."""
        if self.project_id is not None:
            message = await database_sync_to_async(_cluster_message)(
                self.project_id, event["namespace"], event["pod"]
            )
            await self.send_json(message)

    async def pod_status(self, event: PodStatusEvent) -> None:
        if self.project_id is not None:
            await self.send(text_data=event["text"])  # encoded once by the ingest

    async def pod_removed(self, event: PodRemovedEvent) -> None:
        if self.project_id is not None:
            await self.send(text_data=event["text"])

    async def node_seen(self, event: NodeSeenEvent) -> None:
        """A node reported: the page's stale mark of its rows restarts (stale.js)."""
        if self.project_id is not None:
            await self.send(text_data=event["text"])

    async def gpu_health(self, event: GpuHealthLiveEvent) -> None:
        """The GPU of one of the project's pods failed, or one of its processes hit an XID."""
        if self.project_id is not None:
            await self.send(text_data=event["text"])

    async def access_changed(self, event: dict) -> None:
        """Rights of this user (or the project itself) changed: check again, close if gone."""
        if self.project_id is None:
            return
        allowed = await database_sync_to_async(selectors.can_watch)(self.user_id, self.project_id)
        if not allowed:
            await self._leave()
            await self.close(code=CLOSE_FORBIDDEN)

    async def _leave(self) -> None:
        await self.leave_session()
        if self.project_id is not None:
            project_id, self.project_id = self.project_id, None
            await self.channel_layer.group_discard(project_group(project_id), self.channel_name)
            await self.channel_layer.group_discard(
                user_access_group(self.user_id), self.channel_name
            )

    async def disconnect(self, code: int) -> None:
        await self._leave()


def _is_staff(user_id: int | None) -> bool:
    user = get_user_model().objects.filter(pk=user_id).first() if user_id else None
    return user is not None and selectors.is_status_staff(user)


class FleetConsumer(
    CountedSocket, DirectDispatch, SessionBound, NoClientFrames, AsyncJsonWebsocketConsumer
):
    """`/ws/support/fleet/`: tells the support console to redraw when a node's slices or GPUs
    change. Support staff only (4403 otherwise, re-checked on every event)."""

    socket_kind = "fleet"

    joined = False

    def _user_id(self) -> int | None:
        user = self.scope.get("user")
        return user.pk if getattr(user, "is_authenticated", False) else None

    async def connect(self) -> None:
        if await database_sync_to_async(_is_staff)(self._user_id()):
            # joined before the handshake completes: no change is missed after it
            await self.channel_layer.group_add(FLEET_GROUP, self.channel_name)
            await self.join_session()
            self.joined = True
        await self.accept()
        if not self.joined:
            await self.close(code=CLOSE_FORBIDDEN)

    async def fleet_changed(self, event: dict) -> None:
        if not await database_sync_to_async(_is_staff)(self._user_id()):
            await self.disconnect(CLOSE_FORBIDDEN)
            await self.close(code=CLOSE_FORBIDDEN)
            return
        await self.send_json({"type": "fleet.changed"})

    async def disconnect(self, code: int) -> None:
        await self.leave_session()
        if self.joined:
            await self.channel_layer.group_discard(FLEET_GROUP, self.channel_name)
            self.joined = False
