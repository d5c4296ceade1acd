"""Slice config file: the limits of one container, written by the node agent, read by the core.

The node agent writes one file per claim at NodePrepareResources time and mounts it read-only
at ``DEFAULT_PATH`` inside the container (the interception core refuses the GPU when it is
missing or malformed, so an agent bug can never mean "unlimited"). The format is line based:

    version = 1
    claim = <namespace>/<claim name or uid>
    device.0.uuid = GPU-...
    device.0.memory_bytes = 8589934592
    device.0.compute_percent = 50
    device.0.context_floor_bytes = 536870912

``context_floor_bytes`` is the least the core charges for one CUDA context on that GPU: what a
context of that model measured at discovery (``nodeagent.discovery.measure_context_bytes``),
because the core's own measurement of a context can only come out low, never high.

One grammar on both sides (this parser and the C reader, nodeagent/native/src/config.c; the
same case table, tests/native/sliceconfig_cases.json, runs through both): only printable
ASCII, tab and newline; blank and '#' lines skipped; `key = value` with spaces/tabs around
both; `version` exactly "1"; `claim` 1..63 chars without '='; `device.N.uuid` ("GPU-…",
≤ 47 chars, unique), `device.N.memory_bytes` (1..2^64-1), `device.N.compute_percent`
(1..100), N in 0..15 without sign or leading zero, contiguous from 0. Anything else refuses
the whole file.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tranche.agent_protocol import UNMEASURED_CONTEXT_FLOOR_BYTES

DEFAULT_PATH = "/etc/tranche/slice.conf"
DEFAULT_REGION_DIR = "/var/run/tranche/region"
MAX_DEVICES = 16
UUID_MAX = 47
CLAIM_MAX = 63
# Charged per context when discovery could not measure one: above what a CUDA 12 context
# holds on current data-centre GPUs (300-500 MiB), so an unmeasured GPU errs on the safe side.
# One home (tranche/agent_protocol.py): pre-flight's context lint charges the same.
DEFAULT_CONTEXT_FLOOR_BYTES = UNMEASURED_CONTEXT_FLOOR_BYTES
_DEVICE_FIELDS = {"uuid", "memory_bytes", "compute_percent", "context_floor_bytes"}

U64_MAX = (1 << 64) - 1
_DEVICE_KEY = re.compile(
    r"^device\.(0|[1-9][0-9]*)\.(uuid|memory_bytes|compute_percent|context_floor_bytes)\Z"
)
_INT = re.compile(r"^[0-9]+\Z")
_ALLOWED = re.compile(r"^[\t\x20-\x7e]*\Z")
_BLANK = " \t"


class SliceConfigError(ValueError):
    """The config is not something the core would accept; the message says what and where."""


@dataclass(frozen=True)
class DeviceSlice:
    """One GPU's share: a hard memory cap in bytes and a compute share in percent, and the
    least one CUDA context on that GPU is charged."""

    uuid: str
    memory_bytes: int
    compute_percent: int
    context_floor_bytes: int = DEFAULT_CONTEXT_FLOOR_BYTES

    def __post_init__(self) -> None:
        if not self.uuid.startswith("GPU-") or len(self.uuid) > UUID_MAX or "\n" in self.uuid:
            raise SliceConfigError(f"device uuid {self.uuid!r} must look like GPU-… (≤47 chars)")
        if not isinstance(self.memory_bytes, int) or not 0 < self.memory_bytes <= U64_MAX:
            raise SliceConfigError(
                f"memory_bytes must be an integer 1..2^64-1: {self.memory_bytes}"
            )
        if not isinstance(self.compute_percent, int) or not 1 <= self.compute_percent <= 100:
            raise SliceConfigError(f"compute_percent must be 1..100: {self.compute_percent}")
        floor = self.context_floor_bytes
        if not isinstance(floor, int) or not 0 < floor <= U64_MAX:
            raise SliceConfigError(f"context_floor_bytes must be an integer 1..2^64-1: {floor}")


@dataclass(frozen=True)
class SliceConfig:
    """Everything one container may use: its claim and a slice of each GPU it was given."""

    claim: str
    devices: tuple[DeviceSlice, ...]

    def __post_init__(self) -> None:
        if not self.claim or len(self.claim) > CLAIM_MAX or any(c in self.claim for c in "\n="):
            raise SliceConfigError(f"claim must be 1..{CLAIM_MAX} chars without '=' or newline")
        if not 1 <= len(self.devices) <= MAX_DEVICES:
            raise SliceConfigError(f"a slice config holds 1..{MAX_DEVICES} devices")
        uuids = [d.uuid for d in self.devices]
        if len(set(uuids)) != len(uuids):
            raise SliceConfigError("each device may appear only once")


def render(config: SliceConfig) -> str:
    """The file text for config (pure)."""
    lines = [
        "# Tranche slice config, written by the node agent; read-only in the container.",
        "version = 1",
        f"claim = {config.claim}",
    ]
    for i, d in enumerate(config.devices):
        lines += [
            f"device.{i}.uuid = {d.uuid}",
            f"device.{i}.memory_bytes = {d.memory_bytes}",
            f"device.{i}.compute_percent = {d.compute_percent}",
            f"device.{i}.context_floor_bytes = {d.context_floor_bytes}",
        ]
    return "\n".join(lines) + "\n"


def _add_device_field(
    fields: dict[int, dict[str, str]], m: re.Match[str], value: str, where: str
) -> None:
    idx, name = int(m.group(1)), m.group(2)
    if idx >= MAX_DEVICES:
        raise SliceConfigError(f"{where}: device index must be < {MAX_DEVICES}")
    entry = fields.setdefault(idx, {})
    if name in entry:
        raise SliceConfigError(f"{where}: {m.group(0)} repeated")
    if name != "uuid" and not _INT.match(value):
        raise SliceConfigError(f"{where}: {m.group(0)} must be an integer")
    entry[name] = value


def _key_values(text: str, source: str) -> Iterator[tuple[int, str, str]]:
    """(line number, key, value) of each line that is not blank or a comment."""
    for lineno, raw in enumerate(text.split("\n"), 1):
        if not _ALLOWED.match(raw):
            raise SliceConfigError(f"{source}:{lineno}: only printable ASCII and tabs are allowed")
        line = raw.strip(_BLANK)
        if not line or line.startswith("#"):
            continue
        key, sep, value = (part.strip(_BLANK) for part in line.partition("="))
        if not sep:
            raise SliceConfigError(f"{source}:{lineno}: expected key = value")
        yield lineno, key, value


def parse(text: str, source: str = "<slice config>") -> SliceConfig:
    """Parse and validate file text; raises SliceConfigError naming the line at fault."""
    version: int | None = None
    claim: str | None = None
    fields: dict[int, dict[str, str]] = {}
    for lineno, key, value in _key_values(text, source):
        where = f"{source}:{lineno}"
        if key == "version":
            if version is not None or value != "1":
                raise SliceConfigError(f"{where}: version must appear once and be 1")
            version = 1
        elif key == "claim":
            if claim is not None or not 0 < len(value) <= CLAIM_MAX or "=" in value:
                raise SliceConfigError(
                    f"{where}: claim must appear once, 1..{CLAIM_MAX} chars without '='"
                )
            claim = value
        elif m := _DEVICE_KEY.match(key):
            _add_device_field(fields, m, value, where)
        else:
            raise SliceConfigError(f"{where}: unknown key {key!r}")
    if version is None or claim is None or not fields:
        raise SliceConfigError(f"{source}: needs version, claim and at least one device")
    devices = []
    for i in range(max(fields) + 1):
        entry = fields.get(i, {})
        if set(entry) != _DEVICE_FIELDS:
            raise SliceConfigError(
                f"{source}: device.{i} needs uuid, memory_bytes and compute_percent, "
                "and context_floor_bytes"
            )
        devices.append(
            DeviceSlice(
                entry["uuid"],
                int(entry["memory_bytes"]),
                int(entry["compute_percent"]),
                int(entry["context_floor_bytes"]),
            )
        )
    return SliceConfig(claim=claim, devices=tuple(devices))


def read(path: str | os.PathLike[str]) -> SliceConfig:
    """Read and validate the file at path."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as e:
        raise SliceConfigError(f"{path}: only printable ASCII and tabs are allowed") from e
    return parse(text, source=str(path))


def write(path: str | os.PathLike[str], config: SliceConfig) -> None:
    """Write atomically (temp file + rename) and read-only: a reader never sees half a file.

    Idempotent: writing the same config again leaves the same bytes.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".slice.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(render(config))
        os.chmod(tmp, 0o444)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
