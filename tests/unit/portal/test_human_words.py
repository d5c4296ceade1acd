"""One way to say a time (`portal.core.humantime`) and warnings in the tenant's words
(`portal.status.warnings`): pure functions."""

from __future__ import annotations

from datetime import UTC, datetime

from portal.cluster.services import shorten
from portal.core.humantime import human_date, human_time
from portal.status.warnings import raw_text, summary_text, warning_lines

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_human_time_names_utc_and_drops_microseconds():
    assert human_time(datetime(2026, 12, 1, 10, 14, 7, 123456, tzinfo=UTC), NOW) == "10:14:07 UTC"
    assert human_time("2026-11-30T23:58:00.123456+00:00", NOW) == "yesterday 23:58 UTC"
    assert human_time("2026-11-03T10:14:00Z", NOW) == "3 Nov 2026, 10:14 UTC"
    assert human_time(None, NOW) == ""
    assert human_time("not a time", NOW) == "not a time"
    assert human_date(datetime(2026, 11, 3, tzinfo=UTC)) == "3 Nov 2026"


def test_warnings_are_one_line_per_reason_with_count_and_last_time():
    events = [
        ["2025-01-02T10:00:00Z", "FailedResourceClaimCreation", "exceeded quota ... a"],
        ["2025-01-02T10:02:00Z", "FailedResourceClaimCreation", "exceeded quota ... b"],
        ["2025-01-02T10:01:00Z", "Custom", "something"],
    ]
    lines = warning_lines(events)
    assert [(x.reason, x.count, x.last) for x in lines] == [
        ("FailedResourceClaimCreation", 2, "2025-01-02T10:02:00Z"),
        ("Custom", 1, "2025-01-02T10:01:00Z"),
    ]
    assert summary_text(events).splitlines() == [
        "The GPU claim could not be made (FailedResourceClaimCreation), 2 times, "
        "last at 2 Jan 2025, 10:02 UTC",
        "Custom (Custom), once, last at 2 Jan 2025, 10:01 UTC",
    ]
    assert raw_text(events).splitlines()[0] == "2025-01-02T10:01:00Z Custom: something"
    assert summary_text([]) == raw_text([]) == ""


def test_shorten_cuts_at_a_word():
    assert shorten("short", 10) == "short"
    assert shorten("alpha beta gamma delta", 15) == "alpha beta…"
    assert shorten("x" * 20, 10) == "x" * 9 + "…"
