"""A log that cannot be flooded: at most `burst` lines per key (e.g. a node) per `period`.

A misbehaving or hostile agent sending 1,000 bad messages wrote 1,000 warnings. Past the burst,
lines of that key are counted instead of written, and one line says how many were suppressed
when the window ends (written with the key's next line).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable


class RateLimitedLog:
    def __init__(
        self,
        logger: logging.Logger,
        burst: int = 10,
        period: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger, self.burst, self.period, self.clock = logger, burst, period, clock
        self._windows: dict[str, tuple[float, int, int]] = {}  # key -> (start, logged, dropped)
        self._lock = threading.Lock()

    def warning(self, key: str, msg: str, *args: object) -> None:
        """Log `msg % args` unless `key` already logged `burst` lines in this window."""
        with self._lock:
            now = self.clock()
            start, logged, dropped = self._windows.get(key, (now, 0, 0))
            if now - start >= self.period:
                if dropped:
                    self.logger.warning(
                        "%s: %d more similar lines were suppressed in the last %.0f s",
                        key,
                        dropped,
                        now - start,
                    )
                start, logged, dropped = now, 0, 0
            if logged < self.burst:
                logged += 1
                self.logger.warning(msg, *args)
                if logged == self.burst:
                    self.logger.warning(
                        "%s: further lines like this are suppressed for up to %.0f s",
                        key,
                        self.period,
                    )
            else:
                dropped += 1
            self._windows[key] = (start, logged, dropped)


# uvicorn's line and the websockets library's line for one refused handshake
REFUSED_HANDSHAKE_LINES = ('%s - "WebSocket %s" 403', "connection rejected (%d %s)")


class RefusedHandshakes(logging.Filter):
    """A logging filter for uvicorn's error log (`portal/serve.py`): the lines of a refused
    websocket handshake (uvicorn's `"WebSocket /ws/agent/" 403`, websockets' `connection rejected
    (403 Forbidden)`) pass at most `burst` times a `period` together;
    the first line of the next window says how many were suppressed. Every other record passes.
    23,295 refused handshakes in 20 s wrote 46,590 lines (this one and the consumer's)."""

    def __init__(
        self, burst: int = 10, period: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.burst, self.period, self.clock = burst, period, clock
        self.start, self.logged, self.dropped = clock(), 0, 0
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg not in REFUSED_HANDSHAKE_LINES:
            return True
        with self._lock:
            now = self.clock()
            if now - self.start >= self.period:
                if self.dropped:
                    record.msg = (
                        "%d refused websocket handshakes not logged in %.0f s; " + record.msg
                    )
                    record.args = (self.dropped, now - self.start, *(record.args or ()))
                self.start, self.logged, self.dropped = now, 0, 0
            if self.logged < self.burst:
                self.logged += 1
                return True
            self.dropped += 1
            return False
