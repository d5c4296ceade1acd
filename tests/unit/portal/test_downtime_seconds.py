"""An outage's downtime in a month window (docs/billing.md, "The rule"): rounded up to whole
seconds and at least one, since its end is the cluster's Running time (whole seconds)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from portal.cluster.models import SliceOutage
from portal.cluster.outages import downtime_seconds

BEGIN = datetime(2026, 12, 1, tzinfo=UTC)
END = datetime(2027, 1, 1, tzinfo=UTC)
TAINT = datetime(2026, 12, 10, 10, 42, 7, 216_000, tzinfo=UTC)


def outage(started: datetime, ended: datetime | None) -> SliceOutage:
    return SliceOutage(started_at=started, ended_at=ended)  # unsaved: only its times are read


@pytest.mark.parametrize(
    ("ended", "seconds"),
    [
        (TAINT.replace(second=8, microsecond=0), 1),  # Running 0.78 s after the taint
        (TAINT, 1),  # Running in the taint's second: ended_at is the taint (observe_running)
        (TAINT.replace(second=9, microsecond=0), 2),  # 1.78 s
        (TAINT.replace(microsecond=0) + timedelta(hours=1), 3600),  # 3599.78 s
    ],
)
def test_a_part_second_counts_whole(ended, seconds) -> None:
    assert downtime_seconds(outage(TAINT, ended), BEGIN, END) == seconds


def test_an_open_outage_runs_to_the_window_end() -> None:
    assert downtime_seconds(outage(END - timedelta(seconds=10), None), BEGIN, END) == 10


def test_the_window_clips_and_an_outage_outside_counts_nothing() -> None:
    before = outage(BEGIN - timedelta(hours=1), BEGIN + timedelta(seconds=5))
    assert downtime_seconds(before, BEGIN, END) == 5
    assert downtime_seconds(outage(END + timedelta(seconds=1), None), BEGIN, END) == 0
    assert downtime_seconds(outage(BEGIN - timedelta(hours=2), BEGIN - timedelta(hours=1)),
                            BEGIN, END) == 0  # fmt: skip
