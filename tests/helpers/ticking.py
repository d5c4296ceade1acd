"""The node agent's collector ticking on a thread of its own, as `nodeagent.agent` ticks it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from nodeagent.status import Collector


@contextmanager
def collector_ticking(collector: Collector, interval: float) -> Iterator[Collector]:
    """Collect every `interval` seconds until the block ends; then stop and close the
    collector (which thaws every pod its compute backstop holds)."""
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            started = time.monotonic()
            collector.collect()
            stop.wait(max(0.0, interval - (time.monotonic() - started)))

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield collector
    finally:
        stop.set()
        thread.join(timeout=10)
        collector.close()
