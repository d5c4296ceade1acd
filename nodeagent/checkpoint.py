"""Checkpoint of prepared claims: survives an agent restart so a claim is neither lost (the
kubelet would call Unprepare for a claim we forgot) nor prepared twice.

One JSON file, rewritten atomically (temp file, fsync, rename, fsync of the folder), so a crash
mid-write leaves the previous complete checkpoint rather than a torn one.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

VERSION = 1


@dataclass(frozen=True)
class PreparedDevice:
    """One allocated share of one GPU, as prepared for a claim."""

    request: str
    pool: str
    device: str
    uuid: str
    share_id: str
    memory_bytes: int
    compute_percent: int
    cdi_id: str


@dataclass(frozen=True)
class PreparedClaim:
    """What Prepare produced for one claim UID, enough to answer a repeat and to undo it."""

    uid: str
    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...]
    config_path: str
    cdi_path: str
    region_dir: str
    pods: tuple[str, ...] = field(default=())  # "namespace/name/uid" from reservedFor


class Checkpoint:
    """Thread-safe map claim UID -> PreparedClaim backed by one file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._claims = self._load()

    def _load(self) -> dict[str, PreparedClaim]:
        if not self.path.exists():
            return {}
        data = json.loads(self.path.read_text())
        if data.get("version") != VERSION:
            raise ValueError(f"{self.path}: checkpoint version {data.get('version')} unsupported")
        claims = {}
        for uid, raw in data["claims"].items():
            devices = tuple(PreparedDevice(**d) for d in raw.pop("devices"))
            pods = tuple(raw.pop("pods", ()))
            claims[uid] = PreparedClaim(devices=devices, pods=pods, **raw)
        return claims

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"version": VERSION, "claims": {u: asdict(c) for u, c in self._claims.items()}}
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def get(self, uid: str) -> PreparedClaim | None:
        with self._lock:
            return self._claims.get(uid)

    def all(self) -> list[PreparedClaim]:
        with self._lock:
            return list(self._claims.values())

    def put(self, claim: PreparedClaim) -> None:
        with self._lock:
            self._claims[claim.uid] = claim
            self._save()

    def remove(self, uid: str) -> PreparedClaim | None:
        with self._lock:
            claim = self._claims.pop(uid, None)
            if claim is not None:
                self._save()
            return claim
