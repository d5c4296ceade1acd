"""docs/metrics.md's metrics table and a Prometheus exposition, as comparable rows.

Shared by this folder's tests: the in-process diff (every family each process kind serves) and
the real-Prometheus tier (what Prometheus scraped from the running stack)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

DOC = Path(__file__).parents[3] / "docs" / "metrics.md"
IGNORED_LABELS = {"le", "quantile"}


@dataclass(frozen=True)
class Row:
    name: str  # as a PromQL query names it (counters with _total)
    kind: str
    labels: frozenset[str]
    served_by: str


def documented() -> dict[str, Row]:
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"^\| `(tranche_[a-z_]+)` \| (\w+) \|([^|]*)\|[^|]*\| (\w+) \|", line)
        if m:
            labels = frozenset(x.strip() for x in m[3].split(",") if x.strip())
            rows[m[1]] = Row(m[1], m[2], labels, m[4])
    return rows


def served(text: str, served_by: str) -> dict[str, Row]:
    """The exposition's families: name, type and the labels its samples carry."""
    rows = {}
    for fam in text_string_to_metric_families(text):
        name = f"{fam.name}_total" if fam.type == "counter" else fam.name
        labels = frozenset(k for s in fam.samples for k in s.labels) - IGNORED_LABELS
        rows[name] = Row(name, fam.type, labels, served_by)
    return rows
