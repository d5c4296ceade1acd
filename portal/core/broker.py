"""kombu's Redis transport, with a restore of unacknowledged messages that cannot kill a worker.

Why: when Redis restarts at the moment a message was just received, the consumer's
connection is closed (kombu sets the transport's `client` to None) before its channel restores
the message it held; `QoS.restore_unacked` then builds a Redis client from that None and raises
`AttributeError: 'NoneType' object has no attribute 'hostname'` (kombu 5.7.0, the newest
release), or a Redis connection error when Redis is still away. Either one escaped and the
worker process exited (1 run in 3).

The same happens to the ack of a task that finishes after the reconnect (its message belongs to
the closed channel). Here such a failure is logged and the worker goes on. Nothing is lost: the
message is still in Redis's `unacked` hash (ack emulation writes it there before delivery), and
the transport's own `restore_visible` puts it back on its queue once the visibility timeout
(settings: minutes) has passed; meanwhile the worker's reconnect sends `controller.resync_all`
(`portal.celery`), which reconciles every project anyway, and every task is idempotent.
"""

from __future__ import annotations

import logging

import redis as redis_lib
from kombu.transport import redis, virtual

log = logging.getLogger("portal.broker")
# A closed connection (kombu clears its client: AttributeError on None) or Redis away.
LOST = (AttributeError, OSError, redis_lib.RedisError)


class QoS(redis.QoS):
    def restore_unacked(self, client=None):
        try:
            return super().restore_unacked(client)
        except LOST as exc:
            held = len(self._delivered)
            self._delivered.clear()
            log.warning(
                "could not hand %d unacknowledged message(s) back to Redis (%s: %s); they stay in "
                "its unacked set and are redelivered after the visibility timeout",
                held, type(exc).__name__, exc,
            )  # fmt: skip
            return None

    def ack(self, delivery_tag):
        """A task that finished after its channel's connection was closed (Redis restarted
        meanwhile) acks through that closed channel: kombu then fails the same way."""
        try:
            super().ack(delivery_tag)
        except LOST as exc:
            virtual.QoS.ack(self, delivery_tag)  # forget it here; Redis keeps it unacked
            _lost("acknowledge", delivery_tag, exc)

    def reject(self, delivery_tag, requeue=False):
        try:
            super().reject(delivery_tag, requeue=requeue)
        except LOST as exc:
            virtual.QoS.ack(self, delivery_tag)
            _lost("reject", delivery_tag, exc)


def _lost(what: str, tag: str, exc: BaseException) -> None:
    log.warning(
        "could not %s message %s (%s: %s); it stays in Redis's unacked set and is redelivered "
        "after the visibility timeout (every task is idempotent)",
        what, tag, type(exc).__name__, exc,
    )  # fmt: skip


class Channel(redis.Channel):
    QoS = QoS


class Transport(redis.Transport):
    Channel = Channel
