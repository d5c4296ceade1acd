"""The one `wait_for` of the test suite: poll a condition, never sleep a fixed time to pass."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_for(
    check: Callable[[], T | None],
    timeout: float,
    what: str | Callable[[], str],
    explain: Callable[[], str] | None = None,
    interval: float = 0.2,
) -> T:
    """Poll `check` until it returns a truthy value and return that value; on timeout fail
    naming what never happened (`what`, or what it returns then) and `explain()`'s context."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            break
        time.sleep(interval)
    detail = what() if callable(what) else what
    context = f"\n{explain()}" if explain else ""
    pytest.fail(
        f"timed out after {timeout:.0f}s waiting for {detail} (last: {last!r}){context}",
        pytrace=False,
    )
