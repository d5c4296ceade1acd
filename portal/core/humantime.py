"""One way to write a moment for people: `human_time` (used by the `human_time` template filter,
the live rows and the warnings summary), so every page says times the same way.

Within the last 24 h: "10:14:07 UTC" (today) or "yesterday 23:58 UTC"; older: "3 Nov 2026,
10:14 UTC". Always UTC, named, never microseconds; accepts datetimes and ISO 8601 strings (the
cluster's condition times arrive as strings)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def parse_moment(value: datetime | str | None) -> datetime | None:
    """A timezone-aware datetime from a datetime or an ISO 8601 string; None if neither."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def human_time(value: datetime | str | None, now: datetime | None = None) -> str:
    """`value` for a reader (see the module docstring); "" for nothing, the text itself if it is
    not a time."""
    moment = parse_moment(value)
    if moment is None:
        return value if isinstance(value, str) else ""
    moment = moment.astimezone(UTC)
    today = (now or datetime.now(tz=UTC)).astimezone(UTC).date()
    if moment.date() == today:
        return moment.strftime("%H:%M:%S UTC")
    if moment.date() == today - timedelta(days=1):
        return moment.strftime("yesterday %H:%M UTC")
    return f"{moment.day} {moment:%b %Y, %H:%M} UTC"


def human_date(value: datetime | str | None) -> str:
    """A day alone: "3 Nov 2026" (invoice and credit-note dates)."""
    moment = parse_moment(value)
    return f"{moment.day} {moment:%b %Y}" if moment else ""
