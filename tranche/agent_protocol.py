"""The node agent -> portal status message: typed definitions, and the validation derived from them.

One JSON object per websocket frame (`StatusMessage`); the agent builds its parts as the
TypedDicts below, the portal validates a frame with `parse_status()` and stores the pods' fields
in the columns each field names. Every bound comes from the field's annotation, which is sized to
the column it lands in, so a value the database would refuse (a string longer than its column, an
integer over a 32-bit column, a timestamp no date can hold, a NUL byte PostgreSQL cannot store in
text or JSON) is refused here with a reason naming the field, and nothing is stored.
`pods` holds the pod entries the agent has not had acknowledged yet (changed since, or refused
with `retry`) unless `full` is set; the portal answers each frame with a `StatusAck`.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from typing import (
    Annotated,
    Any,
    NotRequired,
    TypedDict,
    get_args,
    get_origin,
    get_type_hints,
)

from tranche import health_kinds

MAX_MESSAGE_BYTES = 256 * 1024
MAX_ITEMS = 512
INT64_MAX = 2**63 - 1  # PositiveBigIntegerField (PostgreSQL bigint)
INT32_MAX = 2**31 - 1  # PositiveIntegerField (integer)
INT16_MAX = 2**15 - 1  # PositiveSmallIntegerField (smallint)
# 9999-12-31T23:59:59Z: the last second a datetime column (and Python's datetime) can hold.
MAX_TIMESTAMP = 253402300799.0


class MessageRejectedError(Exception):
    """A message we refuse; str() is the reason logged and sent back to the agent."""


@dataclass(frozen=True)
class Text:
    """A non-empty string of at most `max_length` characters, without NUL; `column`: where the
    portal stores it (default: the field's own name)."""

    max_length: int = 253
    column: str = ""


@dataclass(frozen=True)
class Whole:
    """A non-negative integer up to `maximum` (the column's range)."""

    maximum: int = INT64_MAX
    column: str = ""


@dataclass(frozen=True)
class Number:
    """A finite non-negative number up to `maximum`."""

    maximum: float = math.inf
    column: str = ""


@dataclass(frozen=True)
class Flag:
    """A JSON boolean."""

    column: str = ""


@dataclass(frozen=True)
class Items:
    """A list of at most MAX_ITEMS objects of the given TypedDict."""

    of: type


@dataclass(frozen=True)
class OneOf:
    """One of these strings."""

    values: tuple[str, ...]
    column: str = ""


@dataclass(frozen=True)
class Exactly:
    """Exactly this string."""

    value: str

    @property
    def values(self) -> tuple[str, ...]:
        return (self.value,)


class GpuReport(TypedDict):
    """One GPU of the node; kept as JSON on the node's token row (`NodeToken.gpus`)."""

    uuid: Annotated[str, Text(253)]
    name: Annotated[str, Text(253)]
    memory_total_bytes: Annotated[int, Whole()]
    memory_used_bytes: Annotated[int, Whole()]
    # Device memory one CUDA context took on this GPU model when the agent measured it (the
    # core's least charge per context); left out when not measured. Pre-flight's context lint
    # charges it (portal/preflight/gather.py `measured_context_mib`).
    context_bytes: NotRequired[Annotated[int, Whole()]]


# What the core charges per context on a GPU whose context the agent could not measure
# (nodeagent/sliceconfig.py); pre-flight charges the same until an agent reports a figure.
UNMEASURED_CONTEXT_FLOOR_BYTES = 512 << 20


class PodReport(TypedDict):
    """One pod's slice figures; stored in `portal.agents.models.PodSliceStatus` columns."""

    namespace: Annotated[str, Text(63)]
    pod: Annotated[str, Text(253, column="pod_name")]
    uid: Annotated[str, Text(64, column="pod_uid")]
    gpu_uuid: Annotated[str, Text(64)]
    memory_limit_bytes: Annotated[int, Whole()]
    memory_used_bytes: Annotated[int, Whole()]
    rejected_allocations: Annotated[int, Whole()]
    compute_target_percent: Annotated[int, Whole(100)]
    compute_used_percent: Annotated[float, Number()]
    throttled_seconds: Annotated[float, Number()]
    processes: Annotated[int, Whole(INT32_MAX)]
    # How long the slice has run under 1 % kernel-busy (nodeagent/slice_usage.py); the live page
    # and the support console call it idle past TRANCHE_IDLE_SLICE_SECONDS. Agents before it
    # leave it out (stored as 0: not idle).
    idle_seconds: NotRequired[Annotated[float, Number()]]
    # Why the NVML backstop holds the pod to its compute share, or stopped processes of it in
    # the last 10 minutes, in the tenant's words (nodeagent/status.py); left out when it does
    # not. The live page shows it in the pod's row.
    enforcement: NotRequired[Annotated[str, Text(300)]]


class RemovedPod(TypedDict):
    namespace: Annotated[str, Text(63)]
    pod: Annotated[str, Text(253)]


FINDING_KINDS = (
    "backstop-stopped",
    "backstop-throttled",  # a claim's pods held to its compute share (nodeagent/throttle.py)
    "nvml-disagrees",
    "prepare-failed",
    # GPU health (nodeagent/health.py): subject is the GPU's UUID for the GPU's own findings,
    # the pod for the pods a failure touched and for the one pod an application XID names.
    *health_kinds.HEALTH_KINDS,
)


class Finding(TypedDict):
    """Something support must see, found by the agent since its last message: the NVML backstop
    stopped a process, NVML and the core disagree on a claim's memory, or preparing a claim
    failed. Kept as JSON on the node's token row (`NodeToken.findings`, the last few)."""

    kind: Annotated[str, OneOf(FINDING_KINDS)]
    ts: Annotated[float, Number(MAX_TIMESTAMP)]
    namespace: Annotated[str, Text(63)]
    subject: Annotated[str, Text(253)]  # the pod, or the claim that failed to prepare
    detail: Annotated[str, Text(500)]
    # GPU health findings only: the GPU concerned and the XID, when one caused it
    gpu: NotRequired[Annotated[str, Text(64)]]
    xid: NotRequired[Annotated[int, Whole(INT16_MAX)]]
    # a pod whose GPU failed: the uid of its claim on that GPU (the slice whose outage it opens)
    claim: NotRequired[Annotated[str, Text(64)]]


class StatusFrame(TypedDict):
    """The whole frame as the agent sends it."""

    type: Annotated[str, Exactly("status")]
    node: Annotated[str, Text(253)]
    seq: Annotated[int, Whole()]
    ts: Annotated[float, Number(MAX_TIMESTAMP)]
    full: Annotated[bool, Flag()]
    dropped: Annotated[int, Whole()]
    gpus: Annotated[list[GpuReport], Items(GpuReport)]
    pods: Annotated[list[PodReport], Items(PodReport)]
    removed: Annotated[list[RemovedPod], Items(RemovedPod)]
    # Optional: agents before it never send it, and an agent with nothing to say leaves it out.
    findings: NotRequired[Annotated[list[Finding], Items(Finding)]]


class RefusedEntry(TypedDict):
    """One pod entry of a frame the portal did not apply, and why. `retry`: the refusal may
    pass later (the watcher has not bound the pod yet, Redis could not be asked), so the agent
    keeps the entry and sends it again; False: it never will (a foreign pod), drop it."""

    namespace: str
    pod: str
    reason: str
    retry: bool


class InService(TypedDict):
    """A GPU support marked back in service (the support console), which the agent holds
    unhealthy since before `at` (epoch s): the agent drops its health taint once the GPU answers
    (nodeagent/health.py `mark_in_service`). Repeated in every answer until the agent reports
    the GPU recovered, or for `IN_SERVICE_REPEATED_FOR` s."""

    gpu: str
    at: float


IN_SERVICE_REPEATED_FOR = 600.0


class StatusAck(TypedDict):
    """The portal's answer to a frame it validated: every entry not listed in `refused` was
    applied (each pod entry and each removal on its own). A frame the portal could not read or
    store at all is answered {"error", "seq"} instead: nothing of it was applied.
    `in_service`: this node's GPUs support marked back in service (`InService`)."""

    ack: int
    refused: NotRequired[list[RefusedEntry]]
    in_service: NotRequired[list[InService]]


@dataclass(frozen=True)
class StatusMessage:
    """A validated frame."""

    node: str
    seq: int
    ts: float
    full: bool
    dropped: int
    gpus: list[GpuReport]
    pods: list[PodReport]
    removed: list[RemovedPod]
    findings: list[Finding]


@functools.cache
def fields_of(kind: type) -> dict[str, Any]:
    """Field name -> its constraint (Text, Whole, ...), in declaration order."""
    hints = get_type_hints(kind, include_extras=True)
    out = {}
    for name, hint in hints.items():
        inner = get_args(hint)[0] if get_origin(hint) is NotRequired else hint
        if get_origin(inner) is Annotated:
            out[name] = get_args(inner)[1]
    return out


@functools.cache
def optional_of(kind: type) -> frozenset[str]:
    """Fields marked NotRequired (read from the hints: with postponed annotations the
    TypedDict's own __optional_keys__ cannot see them)."""
    hints = get_type_hints(kind, include_extras=True)
    return frozenset(name for name, hint in hints.items() if get_origin(hint) is NotRequired)


def columns_of(kind: type) -> dict[str, str]:
    """Field name -> the portal column it is stored in."""
    return {name: (c.column or name) for name, c in fields_of(kind).items()}


def _want(rule: Any) -> str:
    if isinstance(rule, Text):
        return f"a str of 1..{rule.max_length} chars without NUL"
    if isinstance(rule, Whole):
        return f"a non-negative integer (at most {rule.maximum})"
    if isinstance(rule, Number):
        top = "" if rule.maximum == math.inf else f" (at most {rule.maximum:.0f})"
        return f"a non-negative number{top}"
    if isinstance(rule, Flag):
        return "a bool"
    if isinstance(rule, Exactly | OneOf):
        return " or ".join(map(repr, rule.values))
    return "a list"


def _ok(value: Any, rule: Any) -> bool:
    if isinstance(rule, Text):
        return isinstance(value, str) and 0 < len(value) <= rule.max_length and "\x00" not in value
    if isinstance(rule, Whole):
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= rule.maximum
    if isinstance(rule, Number):
        return (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and 0 <= value <= rule.maximum
        )
    if isinstance(rule, Flag):
        return isinstance(value, bool)
    if isinstance(rule, Exactly | OneOf):
        return value in rule.values
    return isinstance(value, list)


def check_object(where: str, obj: Any, kind: type) -> dict:
    """`obj` if it has exactly `kind`'s fields, each within its bounds; else raise
    MessageRejectedError naming the field."""
    fields = fields_of(kind)
    if not isinstance(obj, dict):
        raise MessageRejectedError(f"{where} must be an object")
    missing = sorted(set(fields) - set(obj) - optional_of(kind))
    extra = sorted(set(obj) - set(fields))
    if missing:
        raise MessageRejectedError(f"{where} lacks field(s) {', '.join(missing)}")
    if extra:
        raise MessageRejectedError(f"{where} has unknown field(s) {', '.join(extra)}")
    for name, rule in fields.items():
        if name not in obj:
            continue  # optional, checked missing above
        value = obj[name]
        if not _ok(value, rule):
            shown = json.dumps(value)[:60]
            raise MessageRejectedError(f"{where}.{name} must be {_want(rule)}, got {shown}")
        if isinstance(rule, Items):
            if len(value) > MAX_ITEMS:
                raise MessageRejectedError(f"{where}.{name} has more than {MAX_ITEMS} items")
            for i, item in enumerate(value):
                check_object(f"{name}[{i}]", item, rule.of)
    return obj


def parse_status(text: str | None, data: bytes | None, node: str) -> StatusMessage:
    """Validate one frame from the agent of `node`; raise MessageRejectedError with the reason."""
    if data is not None:
        raise MessageRejectedError("binary frames are not accepted; send JSON text")
    if text is None or len(text.encode()) > MAX_MESSAGE_BYTES:
        raise MessageRejectedError(f"message larger than {MAX_MESSAGE_BYTES} bytes")
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise MessageRejectedError(f"malformed JSON: {exc}") from exc
    except RecursionError as exc:  # e.g. 100,000 nested brackets: the parser's stack gives out
        raise MessageRejectedError(
            "malformed JSON: nested too deeply; a status message is at most a few levels deep"
        ) from exc
    if isinstance(raw, dict) and "type" in raw and raw["type"] != "status":
        raise MessageRejectedError(f"message.type must be 'status', got {raw['type']!r}")
    msg = check_object("message", raw, StatusFrame)
    if msg["node"] != node:
        raise MessageRejectedError(
            f"message names node {msg['node']!r} but the token is {node!r}'s"
        )
    return StatusMessage(
        node=node,
        seq=msg["seq"],
        ts=float(msg["ts"]),
        full=msg["full"],
        dropped=msg["dropped"],
        gpus=msg["gpus"],
        pods=msg["pods"],
        removed=msg["removed"],
        findings=msg.get("findings", []),
    )
