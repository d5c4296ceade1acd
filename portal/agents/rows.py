"""Display rows of the live status table, built once per agent report.

The agent ingest builds each pod's row here when it stores the report and publishes that row to
the project's group as is, so a delivery to a viewer is a send, not a database query. The
status page renders the same rows from the database (`portal.status.selectors.pod_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC

from portal.agents.models import PodSliceStatus

MIB = 1024 * 1024
# Column order of the table; the page and the live updates both use it.
FIELDS = (
    ("pod", "Pod"),
    ("node", "Node"),
    ("gpu", "GPU"),
    ("memory", "Memory used / limit"),
    ("rejected", "Rejected allocations"),
    ("compute", "Compute used / target"),
    ("throttled", "Throttled"),
    ("processes", "Processes"),
    ("reported", "Last report"),
)


@dataclass(frozen=True)
class PodRow:
    """One pod of the table: `key` identifies the row, `cells` maps FIELDS to display text."""

    key: str
    cells: dict[str, str]

    def as_json(self) -> dict:
        return {"key": self.key, "cells": self.cells}

    def ordered_cells(self) -> list[tuple[str, str]]:
        return [(name, self.cells[name]) for name, _label in FIELDS]


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "—"


def pod_row(status: PodSliceStatus) -> PodRow:
    """Display text of one pod's latest status (the single place that formats it)."""
    used = status.memory_used_bytes // MIB
    limit = status.memory_limit_bytes // MIB
    memory_percent = _percent(status.memory_used_bytes, status.memory_limit_bytes)
    reported = status.reported_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    cells = {
        "pod": status.pod_name,
        "node": status.node_name,
        "gpu": status.gpu_uuid,
        "memory": f"{used} / {limit} MiB ({memory_percent})",
        "rejected": str(status.rejected_allocations),
        "compute": f"{status.compute_used_percent:.1f}% / {status.compute_target_percent}%",
        "throttled": f"{status.throttled_seconds:.2f} s",
        "processes": str(status.processes),
        "reported": reported,
    }
    return PodRow(key=f"{status.namespace}/{status.pod_name}", cells=cells)
