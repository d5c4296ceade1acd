"""GPU health in the agent: NVML events (XID, ECC) and a periodic check that each GPU answers.

`HealthMonitor` runs one thread: it waits on an NVML event set (`nvmlEventSetCreate`,
`nvmlDeviceRegisterEvents` for XID and ECC events, `nvmlEventSetWait_v2` in 200 ms slices) and,
every `check_every` seconds, asks each GPU one question (`nvmlDeviceGetMemoryInfo`). What it
learns is classified by `nodeagent.xid`:

- FATAL (XID 48, 79, 94, 95, ...; a double-bit ECC error; a GPU that stopped answering): the GPU
  is unhealthy from that moment. `unhealthy()` lists it, the publisher turns it into a NoExecute
  device taint, and Kubernetes evicts the pods using it. It is healthy again once the GPU was
  reset: it stopped answering and answers again, or support marked it back in service
  (`mark_in_service`, sent by the portal with its answers) and it answers. The unhealthy
  GPUs are checkpointed (`checkpoint`, in the agent's state folder), so an agent restart keeps
  their taints.
- APPLICATION (XID 13, 31, 43, ...): one process's own fault. The kernel log line the driver
  writes for it ("NVRM: Xid (PCI:0000:3b:00): 13, pid=1234, name=python, ...") names the
  process; the event carries that pid so only its pod is told. Nothing is tainted.
- UNKNOWN: reported, nothing drained.

Each change is also an event (`take_events()`), for support and tenants, and `on_change` is
called so the agent publishes at once instead of at its next periodic pass.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nodeagent.discovery import GpuInfo
from nodeagent.xid import LOST, Severity, Verdict, classify_ecc, classify_xid

log = logging.getLogger(__name__)

# nvml.h nvmlEventType* bits this agent listens for.
EVENT_SINGLE_BIT_ECC = 0x1
EVENT_DOUBLE_BIT_ECC = 0x2
EVENT_XID = 0x8
WANTED_EVENTS = EVENT_XID | EVENT_SINGLE_BIT_ECC | EVENT_DOUBLE_BIT_ECC
# The driver's kernel log line for an XID: the GPU by PCI bus, the XID, the process when known.
_XID_LINE = re.compile(
    r"NVRM: Xid \(PCI:([0-9a-fA-F]{4}):([0-9a-fA-F]{2}):[0-9a-fA-F]{2}\): (\d+), pid=(\d+)"
)


@dataclass(frozen=True)
class Unhealthy:
    """A GPU the agent holds unhealthy: since when (epoch s), why, and the XID if one."""

    uuid: str
    since: float
    verdict: Verdict
    xid: int | None = None


@dataclass(frozen=True)
class HealthEvent:
    """Something that happened to a GPU's health, for support and the affected tenants."""

    ts: float
    uuid: str
    severity: Severity
    meaning: str
    xid: int | None = None
    pid: int = 0  # the process the kernel log names (application XIDs); 0: none named
    recovered: bool = False


class KernelLog:
    """New lines of the kernel log (`/dev/kmsg`, one record per read) or of a plain file that
    plays it (simgpu-fault's simulated log), read without blocking from where it ended when
    the agent started. A file that does not exist yet is looked for again on the next read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._partial = b""
        self._absent = False  # not there at the first look: all of it is news once it is
        self.recent: deque[str] = deque(maxlen=64)

    def _open(self) -> bool:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                self._absent = True
                return False
            if not self._absent:
                os.lseek(self._fd, 0, os.SEEK_END)
        return True

    def read(self) -> None:
        """Append what was written since the last call to `recent`."""
        if not self._open():
            return
        while True:
            try:
                chunk = os.read(self._fd, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:  # /dev/kmsg: records overwritten meanwhile; read on
                continue
            if not chunk:
                break
            lines = (self._partial + chunk).split(b"\n")
            self._partial = lines.pop()
            self.recent.extend(line.decode(errors="replace") for line in lines if line)

    def pid_of(self, bus: int, xid: int) -> int:
        """The pid of the newest XID `xid` line on PCI bus `bus`; 0 when none names one."""
        self.read()
        for line in reversed(self.recent):
            m = _XID_LINE.search(line)
            if m and int(m.group(2), 16) == bus and int(m.group(3)) == xid:
                return int(m.group(4))
        return 0


def _address(handle) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


class HealthMonitor:
    """One thread watching the node's GPUs; see the module docstring."""

    def __init__(
        self,
        gpus: list[GpuInfo],
        *,
        on_change: Callable[[], None] = lambda: None,
        kernel_log: Path | None = None,
        check_every: float = 1.0,
        wait_ms: int = 200,
        clock: Callable[[], float] = time.time,
        checkpoint: Path | None = None,
    ) -> None:
        self.gpus = {g.uuid: g for g in gpus}
        self.checkpoint = checkpoint
        self.on_change = on_change
        self.kernel_log = KernelLog(kernel_log) if kernel_log else None
        self.check_every = check_every
        self.wait_ms = wait_ms
        self.clock = clock
        self._lock = threading.Lock()
        self._unhealthy: dict[str, Unhealthy] = {}
        self._lost: set[str] = set()
        self._events: deque[HealthEvent] = deque(maxlen=256)
        # events seen per (GPU, XID or "ecc-double-bit"/"gpu-lost", severity), for /metrics
        self.counts: Counter[tuple[str, str, str]] = Counter()
        self._stop = threading.Event()
        self._ready = threading.Event()  # the event set exists: later events are delivered
        self._thread: threading.Thread | None = None
        self._handles: dict[str, object] = {}
        self._by_address: dict[int, str] = {}
        self._buses: dict[str, int] = {}
        self._load()

    # -- checkpoint: the unhealthy GPUs outlive a restart of the agent ----------------------
    def _load(self) -> None:
        """The GPUs held unhealthy when the agent last ran (a fatal XID on a GPU that kept
        answering is not seen again: without this a restart would untaint it). GPUs this node
        no longer has are dropped; an unreadable file is logged and ignored."""
        if self.checkpoint is None or not self.checkpoint.exists():
            return
        try:
            saved = json.loads(self.checkpoint.read_text())
            for uuid, u in saved.items():
                if uuid in self.gpus:
                    verdict = Verdict(Severity.FATAL, str(u["meaning"]), str(u["taint"]))
                    xid = None if u.get("xid") is None else int(u["xid"])
                    self._unhealthy[uuid] = Unhealthy(uuid, float(u["since"]), verdict, xid)
                    if u.get("lost"):  # it answering again is then its recovery, as before
                        self._lost.add(uuid)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.error("GPU health checkpoint %s unreadable (%s): starting from healthy",
                      self.checkpoint, exc)  # fmt: skip
            return
        if self._unhealthy:
            log.warning("GPU health checkpoint: %s still unhealthy", ", ".join(self._unhealthy))

    def _save(self) -> None:
        """Write the unhealthy GPUs (call with `_lock` held): to a temporary file, then renamed,
        so a crash mid-write leaves the previous checkpoint."""
        if self.checkpoint is None:
            return
        body = {
            u.uuid: {"since": u.since, "xid": u.xid, "meaning": u.verdict.meaning,
                     "taint": u.verdict.taint_value, "lost": u.uuid in self._lost}
            for u in self._unhealthy.values()
        }  # fmt: skip
        tmp = self.checkpoint.with_suffix(".tmp")
        try:
            tmp.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(body, sort_keys=True))
            os.replace(tmp, self.checkpoint)
        except OSError as exc:
            log.error("GPU health checkpoint %s not written: %s", self.checkpoint, exc)

    # -- what the agent reads ------------------------------------------------------------------
    def unhealthy(self) -> dict[str, Unhealthy]:
        with self._lock:
            return dict(self._unhealthy)

    def mark_in_service(self, uuid: str, at: float) -> bool:
        """Support marked the GPU back in service at `at` (epoch s, the portal's clock): a
        failure the agent saw before then is dropped, with a recovery event, if the GPU answers
        now. A GPU that does not answer stays unhealthy (its reset, once it answers, clears it);
        a failure after the mark is news the mark did not know of. True when it was dropped."""
        with self._lock:
            was = self._unhealthy.get(uuid)
            if was is None or was.since > at or uuid in self._lost:
                return False
            del self._unhealthy[uuid]
            self._save()
        meaning = "marked back in service by support"
        self._record(HealthEvent(self.clock(), uuid, Severity.FATAL, meaning, was.xid,
                                 recovered=True))  # fmt: skip
        log.warning("GPU %s marked back in service by support: healthy", uuid)
        self.on_change()
        return True

    def take_events(self) -> list[HealthEvent]:
        out = []
        while self._events:
            out.append(self._events.popleft())
        return out

    # -- thread --------------------------------------------------------------------------------
    def start(self) -> None:
        if self.kernel_log is not None:
            self.kernel_log.read()  # from here on: what was logged before the agent is not news
        self._thread = threading.Thread(target=self._run, name="gpu-health", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=5)  # events raised from here on are seen

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        try:
            self._watch()
        except Exception:  # the agent keeps serving; without this thread no GPU is judged
            log.exception("GPU health monitor stopped: no GPU health events from now on")
        finally:
            self._ready.set()

    def _watch(self) -> None:
        import pynvml

        pynvml.nvmlInit()  # kept for the life of the thread, like discovery's backstop handles
        try:
            event_set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as exc:  # a driver without events: the "answers" check only
            log.warning("NVML events unavailable (%s): checking that GPUs answer only", exc)
            event_set = None
        try:
            for uuid in self.gpus:
                self._register(pynvml, event_set, uuid)
            self._ready.set()
            last_check = 0.0
            while not self._stop.is_set():
                try:
                    if event_set is None:
                        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
                    self._on_event(pynvml.nvmlEventSetWait_v2(event_set, self.wait_ms))
                except pynvml.NVMLError_Timeout:
                    pass
                except pynvml.NVMLError as exc:  # e.g. a GPU lost mid-wait: the check says so
                    log.debug("NVML event wait: %s", exc)
                    self._stop.wait(self.wait_ms / 1000)
                if time.monotonic() - last_check >= self.check_every:
                    last_check = time.monotonic()
                    for uuid in self.gpus:
                        self._check(pynvml, event_set, uuid)
        finally:
            if event_set is not None:
                pynvml.nvmlEventSetFree(event_set)

    def _register(self, pynvml, event_set, uuid: str) -> None:
        try:
            h = self._handles.get(uuid) or pynvml.nvmlDeviceGetHandleByUUID(uuid)
            self._handles[uuid] = h
            self._by_address[_address(h)] = uuid
            self._buses[uuid] = int(pynvml.nvmlDeviceGetPciInfo(h).bus)
            if event_set is not None:
                types = pynvml.nvmlDeviceGetSupportedEventTypes(h) & WANTED_EVENTS
                pynvml.nvmlDeviceRegisterEvents(h, types, event_set)
        except pynvml.NVMLError as exc:
            log.warning("GPU %s: cannot watch its health events: %s", uuid, exc)

    def _check(self, pynvml, event_set, uuid: str) -> None:
        """One question per GPU: does it answer? A change either way is news."""
        h = self._handles.get(uuid)
        try:
            if h is None:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
            pynvml.nvmlDeviceGetMemoryInfo(h)
            answers = True
        except (pynvml.NVMLError_GpuIsLost, pynvml.NVMLError_Unknown):
            answers = False
        except pynvml.NVMLError:
            answers = True  # a query a GPU does not support says nothing about its health
        if not answers and uuid not in self._lost:
            self._lost.add(uuid)
            self._fail(uuid, LOST, None)
        elif answers and uuid in self._lost:
            self._lost.discard(uuid)
            self._register(pynvml, event_set, uuid)  # a reset GPU needs its events again
            with self._lock:
                was = self._unhealthy.pop(uuid, None)
                self._save()
            meaning = "GPU answers again (reset)"
            self._record(HealthEvent(self.clock(), uuid, Severity.FATAL, meaning,
                                     was.xid if was else None, recovered=True))  # fmt: skip
            log.warning("GPU %s answers again: healthy", uuid)
            self.on_change()

    def _on_event(self, data) -> None:
        uuid = self._by_address.get(_address(data.device))
        if uuid is None:
            return
        xid: int | None = None
        if data.eventType & EVENT_XID:
            xid = int(data.eventData)
            verdict: Verdict | None = classify_xid(xid)
        else:
            verdict = classify_ecc(bool(data.eventType & EVENT_DOUBLE_BIT_ECC))
        if verdict is None:
            return
        if verdict.severity is Severity.FATAL:
            self._fail(uuid, verdict, xid)
            return
        pid = 0
        if xid is not None and self.kernel_log is not None and uuid in self._buses:
            pid = self.kernel_log.pid_of(self._buses[uuid], xid)
        log.warning("GPU %s: XID %s (%s, %s), pid %s", uuid, xid, verdict.severity,
                    verdict.meaning, pid or "unknown")  # fmt: skip
        self._record(HealthEvent(self.clock(), uuid, verdict.severity, verdict.meaning, xid, pid))
        self.on_change()

    def _fail(self, uuid: str, verdict: Verdict, xid: int | None) -> None:
        now = self.clock()
        with self._lock:
            held = self._unhealthy.get(uuid)
            # The first cause names the taint and its time; later ones change neither. But a
            # GPU that falls off the bus stops answering at once, and the poll can see that
            # before the XID saying why: that XID names the taint, at the first time.
            if held is None or (held.verdict is LOST and xid is not None):
                since = now if held is None else held.since
                self._unhealthy[uuid] = Unhealthy(uuid, since, verdict, xid)
                self._save()
        log.error("GPU %s unhealthy: %s (XID %s)", uuid, verdict.meaning, xid)
        self._record(HealthEvent(now, uuid, Severity.FATAL, verdict.meaning, xid))
        self.on_change()

    def _record(self, event: HealthEvent) -> None:
        self._events.append(event)
        if not event.recovered:
            what = str(event.xid) if event.xid is not None else event.meaning
            self.counts[(event.uuid, what, str(event.severity))] += 1
