"""Optional profile of the agent's own work: `TRANCHE_PROFILE=<file>` in its environment.

cProfile sees one thread per profiler, and the agent works in two places: the event loop (status
messages, the websocket) and the executor threads its blocking ticks run in (region and NVML
reads, publishing). So there are two profilers, one around the event loop and one
around each blocking call, merged into one pstats file when the agent stops
(`python -m pstats <file>`). Off (the default), nothing is wrapped.
"""

from __future__ import annotations

import contextlib
import cProfile
import functools
import os
import pstats
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")
PATH = os.environ.get("TRANCHE_PROFILE", "")
_loop = cProfile.Profile() if PATH else None
_blocking = cProfile.Profile() if PATH else None
_one_at_a_time = threading.Lock()  # a profiler is enabled in one thread at a time


def blocking(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn`, profiled when it runs (in whichever executor thread) if profiling is on."""
    if _blocking is None:
        return fn

    @functools.wraps(fn)
    def profiled(*args, **kwargs):
        with _one_at_a_time:
            return _blocking.runcall(fn, *args, **kwargs)

    return profiled


@contextlib.contextmanager
def session() -> Iterator[None]:
    """Profile the calling thread (the event loop's) while inside; write the merged stats."""
    if _loop is None:
        yield
        return
    _loop.enable()
    try:
        yield
    finally:
        _loop.disable()
        with _one_at_a_time:
            stats = pstats.Stats(_loop)
            stats.add(_blocking)
            stats.dump_stats(PATH)
