"""The agent's status message and its strict validation (size, JSON, schema, types).

A message is one JSON object:
  {"type": "status", "node": str, "seq": int, "ts": float, "full": bool, "dropped": int,
   "gpus": [{"uuid", "name", "memory_total_bytes", "memory_used_bytes"}],
   "pods": [{"namespace", "pod", "uid", "gpu_uuid", "memory_limit_bytes", "memory_used_bytes",
             "rejected_allocations", "compute_target_percent", "compute_used_percent",
             "throttled_seconds", "processes"}],
   "removed": [{"namespace", "pod"}]}
`pods` holds only pods that changed since the last acknowledged message unless `full` is set.
Any violation rejects the whole message with a reason naming the field; nothing is stored.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

MAX_MESSAGE_BYTES = 256 * 1024
MAX_ITEMS = 512
_INT_MAX = 2**63 - 1

GPU_FIELDS = {"uuid": str, "name": str, "memory_total_bytes": int, "memory_used_bytes": int}
POD_FIELDS = {
    "namespace": str,
    "pod": str,
    "uid": str,
    "gpu_uuid": str,
    "memory_limit_bytes": int,
    "memory_used_bytes": int,
    "rejected_allocations": int,
    "compute_target_percent": int,
    "compute_used_percent": float,
    "throttled_seconds": float,
    "processes": int,
}
REMOVED_FIELDS = {"namespace": str, "pod": str}
TOP_FIELDS = {
    "type": str,
    "node": str,
    "seq": int,
    "ts": float,
    "full": bool,
    "dropped": int,
    "gpus": list,
    "pods": list,
    "removed": list,
}


class MessageRejectedError(Exception):
    """A message we refuse; str() is the reason logged and sent back to the agent."""


@dataclass(frozen=True)
class StatusMessage:
    node: str
    seq: int
    ts: float
    full: bool
    dropped: int
    gpus: list[dict]
    pods: list[dict]
    removed: list[dict]


def _check_value(where: str, value: Any, kind: type) -> None:
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _INT_MAX
    elif kind is float:
        ok = (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value >= 0
        )
    elif kind is str:
        ok = isinstance(value, str) and 0 < len(value) <= 253
    else:
        ok = isinstance(value, kind)
    if not ok:
        want = {int: "a non-negative integer", float: "a non-negative number"}.get(
            kind, f"a {kind.__name__}" + (" of 1..253 chars" if kind is str else "")
        )
        raise MessageRejectedError(f"{where} must be {want}, got {json.dumps(value)[:60]}")


def _check_object(where: str, obj: Any, fields: dict[str, type]) -> dict:
    if not isinstance(obj, dict):
        raise MessageRejectedError(f"{where} must be an object")
    missing = sorted(set(fields) - set(obj))
    extra = sorted(set(obj) - set(fields))
    if missing:
        raise MessageRejectedError(f"{where} lacks field(s) {', '.join(missing)}")
    if extra:
        raise MessageRejectedError(f"{where} has unknown field(s) {', '.join(extra)}")
    for name, kind in fields.items():
        _check_value(f"{where}.{name}", obj[name], kind)
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
    msg = _check_object("message", raw, TOP_FIELDS)
    if msg["type"] != "status":
        raise MessageRejectedError(f"message.type must be 'status', got {msg['type']!r}")
    if msg["node"] != node:
        raise MessageRejectedError(
            f"message names node {msg['node']!r} but the token is {node!r}'s"
        )
    for key in ("gpus", "pods", "removed"):
        if len(msg[key]) > MAX_ITEMS:
            raise MessageRejectedError(f"message.{key} has more than {MAX_ITEMS} items")
    gpus = [_check_object(f"gpus[{i}]", g, GPU_FIELDS) for i, g in enumerate(msg["gpus"])]
    pods = [_check_object(f"pods[{i}]", p, POD_FIELDS) for i, p in enumerate(msg["pods"])]
    removed = [
        _check_object(f"removed[{i}]", r, REMOVED_FIELDS) for i, r in enumerate(msg["removed"])
    ]
    for i, p in enumerate(pods):
        if p["compute_target_percent"] > 100:
            raise MessageRejectedError(f"pods[{i}].compute_target_percent must be at most 100")
    return StatusMessage(
        node=node,
        seq=msg["seq"],
        ts=float(msg["ts"]),
        full=msg["full"],
        dropped=msg["dropped"],
        gpus=gpus,
        pods=pods,
        removed=removed,
    )
