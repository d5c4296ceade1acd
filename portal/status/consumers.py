"""`ProjectStatusConsumer` at /ws/projects/<id>/status/: a project's pod status, live.

Authorised on connect with the page's rule (`selectors.can_watch`) and again on every event, so
a member removed from the organization is disconnected at the next update. A refused caller is
accepted and closed at once with code 4403 (a handshake rejection would reach the browser as a
bare 1006, and the page could not tell "no access" from "network down"); nothing is sent first.

The group is `project.<id>`, the id taken from the URL's digits and checked against the
database. On connect the socket sends a snapshot of every row, so a reconnecting page repairs
whatever it missed while down; then each agent event becomes one row update or removal. Rows
are re-read from the database, so the page shows exactly what the server would render.
"""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from portal.agents.events import PodRemovedEvent, PodStatusEvent, ProjectEvent
from portal.core.groups import project_group
from portal.status import selectors

CLOSE_FORBIDDEN = 4403


def _snapshot(user_id: int | None, project_id: int) -> list[dict] | None:
    if not selectors.can_watch(user_id, project_id):
        return None
    return [row.as_json() for row in selectors.pod_rows(project_id)]


def _row_update(
    user_id: int | None, project_id: int, event: ProjectEvent
) -> tuple[bool, dict | None]:
    """(allowed, message for the page or None when there is nothing to send)."""
    if not selectors.can_watch(user_id, project_id):
        return False, None
    key = f"{event.get('namespace')}/{event.get('pod')}"
    if event["type"] == "pod.removed":
        return True, {"type": "remove", "key": key}
    row = selectors.live_pod_row(project_id, str(event.get("namespace")), str(event.get("pod")))
    if row is None:  # removed since this event was published; its removal event follows
        return True, None
    return True, {"type": "row", **row.as_json()}


class ProjectStatusConsumer(AsyncJsonWebsocketConsumer):
    project_id: int | None = None

    def _user_id(self) -> int | None:
        user = self.scope.get("user")
        return user.pk if getattr(user, "is_authenticated", False) else None

    async def connect(self) -> None:
        project_id = int(self.scope["url_route"]["kwargs"]["project_id"])
        rows = await database_sync_to_async(_snapshot)(self._user_id(), project_id)
        await self.accept()
        if rows is None:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.project_id = project_id
        await self.channel_layer.group_add(project_group(project_id), self.channel_name)
        await self.send_json({"type": "snapshot", "rows": rows})

    async def _forward(self, event: ProjectEvent) -> None:
        if self.project_id is None:
            return
        allowed, message = await database_sync_to_async(_row_update)(
            self._user_id(), self.project_id, event
        )
        if not allowed:
            await self._leave()
            await self.close(code=CLOSE_FORBIDDEN)
        elif message is not None:
            await self.send_json(message)

    async def pod_status(self, event: PodStatusEvent) -> None:
        await self._forward(event)

    async def pod_removed(self, event: PodRemovedEvent) -> None:
        await self._forward(event)

    async def _leave(self) -> None:
        if self.project_id is not None:
            await self.channel_layer.group_discard(
                project_group(self.project_id), self.channel_name
            )
            self.project_id = None

    async def disconnect(self, code: int) -> None:
        await self._leave()
