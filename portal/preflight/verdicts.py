"""The verdict of one check: ok / warning / will_fail, the reason in the tenant's words, the fix.

Pure data shared by every check module, the service, the page and the JSON API.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Level(StrEnum):
    OK = "ok"
    WARNING = "warning"
    WILL_FAIL = "will_fail"


@dataclass(frozen=True)
class Verdict:
    """One answer: which check, how bad, why (with the figures it rests on) and what to do."""

    check: str
    level: Level
    subject: str
    reason: str
    fix: str = ""
    figures: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["level"] = str(self.level)
        return out


def ok(check: str, subject: str, reason: str, **figures: Any) -> Verdict:
    return Verdict(check, Level.OK, subject, reason, "", figures)


def warning(check: str, subject: str, reason: str, fix: str, **figures: Any) -> Verdict:
    return Verdict(check, Level.WARNING, subject, reason, fix, figures)


def will_fail(check: str, subject: str, reason: str, fix: str, **figures: Any) -> Verdict:
    return Verdict(check, Level.WILL_FAIL, subject, reason, fix, figures)


def overall(verdicts: list[Verdict]) -> Level:
    """The worst level among the verdicts (ok when there are none)."""
    if any(v.level is Level.WILL_FAIL for v in verdicts):
        return Level.WILL_FAIL
    if any(v.level is Level.WARNING for v in verdicts):
        return Level.WARNING
    return Level.OK
