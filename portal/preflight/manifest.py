"""Reading a tenant's manifest: bounded multi-document YAML in, plain objects and pod specs out.

Pure (no Django, no cluster). Only the safe loader: no tags that build Python objects. The input
is untrusted work, so every bound is checked before the cost it prevents: the size on the bytes
before parsing (a 5 MB paste is refused without work); `[`/`{` nesting before parsing (5,000
nested `[` was a RecursionError, a 500); then one pass over the parser's events, before any
node is built, counts nodes and scalar bytes as they are once aliases are expanded and the
nesting depth, and stops at a cap (a 523-byte alias bomb expanded to gigabytes when
serialised); the objects' JSON size is checked again after loading.
`apiVersion`, `kind` and `metadata.name` must look like Kubernetes names, because they become
the path of a request (`gather.dry_run`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import yaml

# libyaml (C) where PyYAML was built with it, as its wheels are; the pure-Python one otherwise
_Parser = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_MANIFEST_BYTES = 1024 * 1024
MAX_OBJECTS = 100
MAX_DEPTH = 64  # Kubernetes objects nest ~15 deep; PyYAML's composer recurses per level
MAX_NODES = 200_000  # expanded; a 1 MiB manifest of real objects has ~50,000
MAX_SERIALISED_BYTES = 2 * 1024 * 1024
API_VERSION = re.compile(r"v1|[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/v[0-9]+((alpha|beta)[0-9]+)?")
KIND = re.compile(r"[A-Za-z][A-Za-z0-9]{0,62}")
# What an object name may hold in a request path: no `/`, `?`, `#`, `%` or `..` segments.
NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9:._@]{0,251}[A-Za-z0-9])?")

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


class _Open:
    """A sequence or mapping whose end event has not come yet."""

    __slots__ = ("anchor", "bytes", "nodes")

    def __init__(self, anchor: str | None, nodes: int, size: int) -> None:
        self.anchor, self.nodes, self.bytes = anchor, nodes, size


def _too_many(line: int) -> ManifestError:
    return ManifestError(
        f"The manifest holds more than {MAX_NODES:,} values once its YAML aliases (*name) are "
        f"expanded (at line {line}); pre-flight stops there, because a few hundred bytes of "
        "aliases can stand for gigabytes. Write the values out, or check the objects of one "
        "workload at a time."
    )


def _too_long(line: int) -> ManifestError:
    return ManifestError(
        f"The manifest's values come to more than {MAX_SERIALISED_BYTES // 1024 // 1024} MiB "
        f"once its YAML aliases (*name) are expanded (at line {line}); pre-flight sends at most "
        "that. Write the values out, or check fewer objects at a time."
    )


def _too_deep(line: int) -> ManifestError:
    return ManifestError(
        f"The manifest nests deeper than {MAX_DEPTH} levels at line {line}; no Kubernetes "
        "object does. Check the brackets."
    )


def _check_expansion(text: str) -> None:
    """One pass over the parser's events (libyaml, in C), before any node is built: the values
    the manifest stands for once aliases are expanded (an alias counts as everything its anchor
    names: nodes, and bytes of scalars), and the nesting depth. It stops at the first event past
    a cap, so a 523-byte bomb of 10^7 expanded nodes, or one long string aliased 100,000 times
    (62 GB as JSON), costs a few hundred events. Aliases stay allowed (PyYAML and other tools
    write them for repeated values)."""
    nodes = size = 0
    anchors: dict[str, tuple[int, int]] = {}
    stack: list[_Open] = []
    for event in yaml.parse(text, Loader=_Parser):
        kind = type(event)
        if kind is yaml.ScalarEvent:
            nodes, size = nodes + 1, size + len(event.value)
            if event.anchor:
                anchors[event.anchor] = (1, len(event.value))
        elif kind is yaml.AliasEvent:
            # an unknown anchor is the composer's error, with its own message
            more_nodes, more_bytes = anchors.get(event.anchor, (1, 0))
            nodes, size = nodes + more_nodes, size + more_bytes
        elif kind is yaml.SequenceStartEvent or kind is yaml.MappingStartEvent:
            stack.append(_Open(event.anchor, nodes, size))
            nodes += 1
            if len(stack) > MAX_DEPTH:
                raise _too_deep(event.start_mark.line + 1)
        elif kind is yaml.SequenceEndEvent or kind is yaml.MappingEndEvent:
            opened = stack.pop()
            if opened.anchor:
                anchors[opened.anchor] = (nodes - opened.nodes, size - opened.bytes)
        elif kind is yaml.DocumentStartEvent:
            anchors.clear()  # anchors are per document
        if nodes > MAX_NODES:
            raise _too_many(event.start_mark.line + 1)
        if size > MAX_SERIALISED_BYTES:
            raise _too_long(event.start_mark.line + 1)


_BRACKET = re.compile(r"[\[\]{}]")


def _check_flow_depth(text: str) -> None:
    """Refuse deep `[`/`{` nesting before parsing: PyYAML's scanner is quadratic in flow depth
    (5,000 levels: 0.5 s; a 1 MiB paste of `[` would take hours). Brackets in strings count
    too, which only matters past MAX_DEPTH unclosed ones."""
    depth = 0
    for match in _BRACKET.finditer(text):
        depth = depth + 1 if match.group() in "[{" else max(0, depth - 1)
        if depth > MAX_DEPTH:
            raise _too_deep(text.count("\n", 0, match.start()) + 1)


def _load(raw: bytes) -> list[Any]:
    text = raw.decode("utf-8")
    _check_flow_depth(text)
    _check_expansion(text)
    loader = _Loader(text)  # bounded now: the events were counted
    try:
        docs = []
        while loader.check_data():
            docs.append(loader.get_data())
        return docs
    finally:
        loader.dispose()


def _check_object(index: int, obj: Any) -> None:
    if not isinstance(obj, dict) or not obj.get("kind") or not obj.get("apiVersion"):
        raise ManifestError(
            f"Document {index} is not a Kubernetes object (it needs apiVersion and kind)."
        )
    api_version, kind = obj["apiVersion"], obj["kind"]
    if not isinstance(api_version, str) or not API_VERSION.fullmatch(api_version):
        raise ManifestError(
            f"Document {index}: apiVersion {str(api_version)[:80]!r} is not a Kubernetes API "
            "version (v1, or group/version such as apps/v1). Fix it and check again."
        )
    if not isinstance(kind, str) or not KIND.fullmatch(kind):
        raise ManifestError(
            f"Document {index}: kind {str(kind)[:80]!r} is not a Kubernetes kind (e.g. Deployment)."
        )
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        raise ManifestError(f"Document {index} ({kind}) has no metadata.name.")
    if not NAME.fullmatch(meta["name"]):
        raise ManifestError(
            f"Document {index} ({kind}): metadata.name {meta['name'][:80]!r} is not a valid "
            "object name (letters, digits, '-', '.', at most 253 characters)."
        )


def _where(raw: str | bytes, mark) -> str:
    """Where the YAML broke, in the tenant's lines. libyaml puts the mark of a manifest that
    ends too early (`kind: [`) on the line after the last one: that is said as the last line's
    end, not as a line the tenant never wrote."""
    if mark is None:
        return ""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    lines = len(text.splitlines()) or 1
    if mark.line >= lines:
        return f" at the end of line {lines}"
    return f" at line {mark.line + 1}, column {mark.column + 1}"


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
        docs = _load(raw)
    except UnicodeDecodeError as exc:
        raise ManifestError("The manifest is not UTF-8 text. Paste the YAML itself.") from exc
    except yaml.YAMLError as exc:
        where = _where(raw, getattr(exc, "problem_mark", None))
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ManifestError(f"The manifest is not valid YAML{where}: {problem}.") from exc
    except ManifestError:
        raise
    except (ValueError, RecursionError) as exc:  # e.g. an integer of 5,000 digits
        raise ManifestError(
            "The manifest holds a value pre-flight cannot read (a number too long to be one?). "
            "Fix it and check again."
        ) from exc
    objects = [d for d in docs if d is not None]
    if not objects:
        raise ManifestError("The manifest is empty. Paste at least one Kubernetes object.")
    if len(objects) > MAX_OBJECTS:
        raise ManifestError(f"The manifest holds {len(objects)} objects; at most {MAX_OBJECTS}.")
    for index, obj in enumerate(objects, start=1):
        _check_object(index, obj)
    # What the dry runs will send; dates and other non-JSON scalars are sent as text.
    size = len(json.dumps(objects, default=str))
    if size > MAX_SERIALISED_BYTES:
        raise ManifestError(
            f"The manifest's objects are {size / 1024 / 1024:.1f} MiB as JSON; pre-flight sends "
            f"at most {MAX_SERIALISED_BYTES // 1024 // 1024} MiB. Check fewer objects at a time."
        )
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
