"""The live status page's one row type, `LiveRow`, and the rows of the agents' reports.

The agent ingest builds each pod's row here when it stores the report and publishes that row to
the project's group as is, so a delivery to a viewer is a send, not a database query. The
status page renders the same rows from the database (`portal.status.selectors.pod_rows`), and
the cluster's word about each pod in the same type (`portal.status.selectors.cluster_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from portal.agents.models import PodSliceStatus
from portal.core.humantime import human_time

MIB = 1024 * 1024
GIB = 1024 * MIB
# Column order of the table; the page and the live updates both use it.
FIELDS = (
    ("pod", "Pod"),
    ("node", "Node"),
    ("gpu", "GPU"),
    ("memory", "Memory used / limit"),
    ("rejected", "Rejected allocations"),
    ("compute", "Compute used / target"),
    ("throttled", "Throttled"),
    ("backstop", "Backstop"),
    ("processes", "Processes"),
    ("reported", "Last report"),
)


@dataclass(frozen=True)
class LiveRow:
    """One row of the live page: `key` identifies it, `cells` maps its table's `fields` to
    display text. An agent's row carries `figures`, the numbers its memory bar, compute gauge and
    chart point are drawn from (ts: the report time in epoch seconds; memory in MiB; compute in
    percent); a cluster row its `reason` class (tranche.pod_reasons) and `raw`, the Warning
    events as Kubernetes wrote them."""

    key: str
    cells: dict[str, str]
    fields: tuple[tuple[str, str], ...] = FIELDS
    figures: dict[str, float] = field(default_factory=dict)
    reason: str = ""
    raw: str = ""

    def as_json(self) -> dict:
        if self.fields is FIELDS:
            return {"key": self.key, "cells": self.cells, "figures": self.figures}
        return {"key": self.key, "cells": self.cells, "reason": self.reason, "raw": self.raw}

    def ordered_cells(self) -> list[tuple[str, str]]:
        return [(name, self.cells[name]) for name, _label in self.fields]


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "—"


def slice_size(limit_bytes: int) -> str:
    """ "8 GiB" for whole GiB, else "1536 MiB"."""
    if limit_bytes and limit_bytes % GIB == 0:
        return f"{limit_bytes // GIB} GiB"
    return f"{limit_bytes // MIB} MiB"


def gpu_text(status: PodSliceStatus, gpu_name: str) -> str:
    """ "Tesla V100-PCIE-32GB · 8 GiB slice · 25 %" then the GPU's UUID on its own line: the
    model the node's agent reported for that GPU, the slice's cap and its compute share."""
    size = slice_size(status.memory_limit_bytes)
    model = gpu_name or "GPU (model not reported yet)"
    return f"{model} · {size} slice · {status.compute_target_percent} %\n{status.gpu_uuid}"


def pod_row(status: PodSliceStatus, gpu_name: str | None = None) -> LiveRow:
    """Display text of one pod's latest status (the single place that formats it). `gpu_name`
    is the model its node's agent reports for the pod's GPU; by default the `gpu_name` the
    page's query annotates (`agents.selectors.project_pod_statuses`)."""
    if gpu_name is None:
        gpu_name = getattr(status, "gpu_name", "") or ""
    used = status.memory_used_bytes // MIB
    limit = status.memory_limit_bytes // MIB
    memory_percent = _percent(status.memory_used_bytes, status.memory_limit_bytes)
    cells = {
        "pod": status.pod_name,
        "node": status.node_name,
        "gpu": gpu_text(status, gpu_name),
        "memory": f"{used} / {limit} MiB ({memory_percent})",
        "rejected": str(status.rejected_allocations),
        "compute": f"{status.compute_used_percent:.1f}% / {status.compute_target_percent}%",
        "throttled": f"{status.throttled_seconds:.2f} s",
        # Why the node's backstop acts on the pod (work around the slice's meter): held to its
        # share, or processes stopped over the memory cap; "—" while it does not.
        "backstop": status.enforcement or "—",
        "processes": str(status.processes),
        "reported": human_time(status.reported_at),
    }
    figures = {
        "ts": round(status.reported_at.timestamp(), 3),
        "memory_used": round(status.memory_used_bytes / MIB, 1),
        "memory_limit": round(status.memory_limit_bytes / MIB, 1),
        "compute_used": round(status.compute_used_percent, 1),
        "compute_target": status.compute_target_percent,
    }
    return LiveRow(key=f"{status.namespace}/{status.pod_name}", cells=cells, figures=figures)
