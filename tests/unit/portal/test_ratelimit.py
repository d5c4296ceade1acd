"""RateLimitedLog: a burst per window, then one line counting what was suppressed."""

from __future__ import annotations

import logging

from portal.core.ratelimit import RateLimitedLog


def test_burst_then_suppressed_then_counted_when_the_window_ends(caplog):
    now = [0.0]
    limited = RateLimitedLog(
        logging.getLogger("t.ratelimit"), burst=3, period=60, clock=lambda: now[0]
    )
    with caplog.at_level(logging.WARNING, logger="t.ratelimit"):
        for i in range(100):
            limited.warning("node a", "bad %d", i)
        now[0] = 61.0
        limited.warning("node a", "bad %d", 100)
    messages = [r.getMessage() for r in caplog.records]
    assert messages[:3] == ["bad 0", "bad 1", "bad 2"]
    assert "further lines like this are suppressed" in messages[3]
    assert messages[4] == "node a: 97 more similar lines were suppressed in the last 61 s"
    assert messages[5] == "bad 100"
    assert len(messages) == 6
