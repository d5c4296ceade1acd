"""A pod's recent Warning events in the tenant's words (pure: no database, no Django models).

Kubernetes repeats itself: a pod over its GPU quota collects ten near-identical
FailedResourceClaimCreation events. The live page shows one line per event reason, in words a
tenant can act on, with how many times it happened and when last; the events' own text stays
available behind a "details" toggle (`raw_text`). The pod's reason column (the classifier's
verdict, `tranche.pod_reasons`) comes first; these lines only say what led there.
"""

from __future__ import annotations

from dataclasses import dataclass

from portal.core.humantime import human_time, parse_moment

# What each Kubernetes event reason means for the tenant (reasons not listed show as they are).
EVENT_WORDS = {
    "FailedResourceClaimCreation": "The GPU claim could not be made",
    "FailedScheduling": "No node could take the pod yet",
    "FailedCreate": "The workload could not create its pod",
    "FailedPrepareDynamicResources": "The node could not prepare the GPU slice",
    "BackOff": "The container keeps stopping and is restarted with a growing delay",
    "Failed": "A container could not start (often the image)",
    "ErrImagePull": "The image could not be pulled",
    "FailedMount": "A volume could not be mounted",
    "OOMKilling": "A container ran out of RAM and was stopped",
    "Unhealthy": "A health probe failed",
    "Evicted": "The node evicted the pod",
}


@dataclass(frozen=True)
class WarningLine:
    """Every event of one reason: the words, how many, and the newest time."""

    reason: str
    words: str
    count: int
    last: str  # as stored (the cluster's time text)

    def text(self) -> str:
        times = "once" if self.count == 1 else f"{self.count} times"
        return f"{self.words} ({self.reason}), {times}, last at {human_time(self.last)}"


def _order(when: str) -> float:
    moment = parse_moment(when)
    return moment.timestamp() if moment else 0.0


def warning_lines(events: list[list[str]]) -> list[WarningLine]:
    """One line per reason of `events` ([time, reason, message], oldest first), the most
    recent reason first."""
    grouped: dict[str, list[str]] = {}
    for when, reason, _message in events:
        grouped.setdefault(reason, []).append(when)
    lines = [
        WarningLine(reason, EVENT_WORDS.get(reason, reason), len(times), max(times, key=_order))
        for reason, times in grouped.items()
    ]
    return sorted(lines, key=lambda line: _order(line.last), reverse=True)


def summary_text(events: list[list[str]]) -> str:
    """The warnings column: one line per reason (see `warning_lines`)."""
    return "\n".join(line.text() for line in warning_lines(events))


def raw_text(events: list[list[str]]) -> str:
    """The events as Kubernetes wrote them, newest first: `time reason: message` per line."""
    return "\n".join(f"{when} {reason}: {message}" for when, reason, message in events[::-1])
