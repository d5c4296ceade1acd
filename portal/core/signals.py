"""Logging out ends the session's live sockets (`portal.core.sockets.SessionBound`).

Django's `logout()` sends `user_logged_out` before it flushes the session, so the key is still
there. A channel layer that cannot be reached must not break logging out: the sockets then
end at their next access check or when the page is closed, and it is logged.
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth.signals import user_logged_out
from django.dispatch import receiver
from redis.exceptions import RedisError

from portal.core.groups import session_group

log = logging.getLogger(__name__)


@receiver(user_logged_out, dispatch_uid="tranche-close-sockets-on-logout")
def close_sockets_of_session(sender, request, user, **kwargs) -> None:
    key = getattr(getattr(request, "session", None), "session_key", None)
    layer = get_channel_layer()
    if not key or layer is None:
        return
    try:
        async_to_sync(layer.group_send)(session_group(key), {"type": "session.ended"})
    except (RedisError, OSError) as exc:
        log.warning("logout: live sockets of the session not told to close (%s)", exc)
