"""Tell live status sockets when a viewer's rights may have changed (`access.changed`).

Sent after the transaction commits, to the affected user's group, or to the project's group when
a project goes; each socket then re-checks `can_watch` once, so deliveries themselves need no
permission query. A failure to reach Redis is logged, not raised: the change itself is stored,
and an open socket keeps its old rights until it reconnects (at most the page's lifetime).
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save
from django.dispatch import receiver

from portal.core.groups import project_group, user_access_group
from portal.tenants.models import Membership, Project

log = logging.getLogger("portal.status")
EVENT = {"type": "access.changed"}


def _send(group: str) -> None:
    try:
        async_to_sync(get_channel_layer().group_send)(group, EVENT)
    except Exception as exc:  # Redis down: the change is stored; sockets re-check on reconnect
        log.warning("could not notify live sockets in %s of an access change: %s", group, exc)


def notify_user(user_id: int) -> None:
    transaction.on_commit(lambda: _send(user_access_group(user_id)))


@receiver([post_save, post_delete], sender=Membership)
def _membership_changed(sender, instance: Membership, **kwargs) -> None:
    notify_user(instance.user_id)


@receiver(post_save, sender=get_user_model())
def _user_changed(sender, instance, created: bool = False, update_fields=None, **kwargs) -> None:
    if created or (update_fields and set(update_fields) <= {"last_login"}):  # a login: no change
        return
    notify_user(instance.pk)


@receiver(m2m_changed, sender=get_user_model().groups.through)
def _user_groups_changed(sender, instance, action: str, reverse: bool, pk_set, **kwargs) -> None:
    if not action.startswith("post_"):
        return
    users = (pk_set or ()) if reverse else [instance.pk]
    for user_id in users:
        notify_user(user_id)


@receiver(post_delete, sender=Project)
def _project_deleted(sender, instance: Project, **kwargs) -> None:
    group = project_group(instance.pk)  # now: Django clears pk once the row is deleted
    transaction.on_commit(lambda: _send(group))


@receiver(post_save, sender=Project)
def _project_marked_deleted(sender, instance: Project, update_fields=None, **kwargs) -> None:
    """A project kept for its billing history but deleted: its live pages close as if it went."""
    if instance.deleted_at is not None and update_fields and "deleted_at" in update_fields:
        group = project_group(instance.pk)
        transaction.on_commit(lambda: _send(group))
