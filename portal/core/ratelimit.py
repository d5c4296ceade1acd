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
