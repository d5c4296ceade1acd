"""Reading a tenant's manifest: bounded multi-document YAML in, plain objects and pod specs out.

Pure (no Django, no cluster). Only `yaml.safe_load_all`: no tags that build Python objects. The
size bound is checked on the bytes before parsing, so a 5 MB paste is refused without work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import yaml

MAX_MANIFEST_BYTES = 1024 * 1024
MAX_OBJECTS = 100

# kind -> path from the object to its pod spec
POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}


class ManifestError(ValueError):
    """The manifest cannot be read; the message says what to change."""


def parse_manifest(text: str | bytes) -> list[dict[str, Any]]:
    """Every non-empty document, each a mapping with apiVersion, kind and metadata.name."""
    raw = text.encode() if isinstance(text, str) else text
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ManifestError(
            f"The manifest is {len(raw) / 1024 / 1024:.1f} MiB; pre-flight reads at most "
            f"{MAX_MANIFEST_BYTES // 1024 // 1024} MiB. Check the objects of one workload at a "
            "time."
        )
    try:
        docs = list(yaml.safe_load_all(raw.decode("utf-8")))
    except UnicodeDecodeError as exc:
        raise ManifestError("The manifest is not UTF-8 text. Paste the YAML itself.") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ManifestError(f"The manifest is not valid YAML{where}: {problem}.") from exc
    objects = [d for d in docs if d is not None]
    if not objects:
        raise ManifestError("The manifest is empty. Paste at least one Kubernetes object.")
    if len(objects) > MAX_OBJECTS:
        raise ManifestError(f"The manifest holds {len(objects)} objects; at most {MAX_OBJECTS}.")
    for index, obj in enumerate(objects, start=1):
        if not isinstance(obj, dict) or not obj.get("kind") or not obj.get("apiVersion"):
            raise ManifestError(
                f"Document {index} is not a Kubernetes object (it needs apiVersion and kind)."
            )
        meta = obj.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
            raise ManifestError(f"Document {index} ({obj['kind']}) has no metadata.name.")
    return objects


def describe(obj: dict[str, Any]) -> str:
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"


@dataclass(frozen=True)
class PodTemplate:
    """A pod spec found in a workload object, with the metadata its checks read."""

    owner: str
    spec: dict[str, Any]
    annotations: dict[str, str]
    replicas: int


def pod_templates(objects: list[dict[str, Any]]) -> list[PodTemplate]:
    """The pod spec of every workload kind pre-flight knows, with its replica count."""
    found = []
    for obj in objects:
        path = POD_SPEC_PATHS.get(str(obj.get("kind")))
        if path is None:
            continue
        node: Any = obj
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        template_meta: Any = obj
        for key in path[:-1]:
            template_meta = template_meta.get(key, {})
        annotations = {
            **(obj.get("metadata", {}).get("annotations") or {}),
            **((template_meta.get("metadata") or {}).get("annotations") or {}),
        }
        replicas = obj.get("spec", {}).get("replicas", 1) if obj["kind"] != "Pod" else 1
        replicas = replicas if isinstance(replicas, int) and replicas >= 0 else 1
        found.append(PodTemplate(describe(obj), node, annotations, replicas))
    return found


def containers(pod: PodTemplate) -> list[dict[str, Any]]:
    items = [*(pod.spec.get("initContainers") or []), *(pod.spec.get("containers") or [])]
    return [c for c in items if isinstance(c, dict)]


_SUFFIX = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
    "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}  # fmt: skip
_QUANTITY = re.compile(r"^\s*([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]{0,2})\s*$")


def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes quantity ("500m", "4Gi", 2) as a number; raises ManifestError if unreadable."""
    match = _QUANTITY.match(str(value))
    if not match or match.group(2) not in _SUFFIX:
        raise ManifestError(f"{value!r} is not a Kubernetes quantity (e.g. 500m, 2, 4Gi).")
    try:
        return Decimal(match.group(1)) * Decimal(_SUFFIX[match.group(2)])
    except InvalidOperation as exc:
        raise ManifestError(f"{value!r} is not a Kubernetes quantity.") from exc


def mib(value: Decimal) -> int:
    return int(value / 2**20)
