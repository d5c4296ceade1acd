"""Reader of a container's shared accounting region (written by the interception core).

The layout mirrors nodeagent/native/src/region.h; tests/native/test_region_layout.py pins both
sides. The node agent reads regions to report memory used against the limit, rejected
allocations, compute time used against the target and time spent throttled, and calls
``reclaim_dead`` to give back the memory of processes that died without freeing it.

A slot is in use while its lock on byte ``LOCK_BASE + slot`` of the region file is held (an
open-file-description lock, dropped by the kernel when the process dies) OR its process still
runs: the owner can drop its own lock, so a free lock alone never makes a slot dead. The
process is identified by its pid in its PID namespace, that namespace's inode and its
/proc starttime, all recorded by the core; the agent, outside the container, finds it by
scanning /proc for a process with that namespace, innermost pid and start time. OFD and POSIX
locks conflict, so the POSIX F_GETLK/lockf here see the lock.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import functools
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = 0x47525254
MAJOR = 2
MINOR = 0
MAX_DEVICES = 16
MAX_SLOTS = 64
UUID_LEN = 48
CLAIM_LEN = 64
LOCK_BASE = 0x40000000
REGION_FILE = "region.bin"

# Offsets within the file (region.h); the layout test compares these with the C compiler's.
HEADER = struct.Struct("<IHHIIII Q 64s")  # magic major minor header_size devices slots rsv created
DEVICE = struct.Struct("<48s Q Q Q Q I I q Q Q Q Q")
SLOT = struct.Struct("<I I Q Q 16Q")
DEVICES_OFFSET = 96
DEVICE_SIZE = 128
SLOTS_OFFSET = DEVICES_OFFSET + MAX_DEVICES * DEVICE_SIZE
SLOT_SIZE = 152
REGION_SIZE = SLOTS_OFFSET + MAX_SLOTS * SLOT_SIZE
MEM_USED_OFFSET = 56  # within a device record
SLOT_MEM_OFFSET = 24  # within a slot record

# Every slot's pid (its first field) in one call: most slots are free, so only the taken ones
# are decoded whole.
_PIDS = struct.Struct("<" + f"I{SLOT_SIZE - 4}x" * (MAX_SLOTS - 1) + "I")

_FLOCK = struct.Struct("hhxxxxqqixxxx")  # struct flock on x86_64/aarch64 Linux


class RegionError(RuntimeError):
    """The region is missing, corrupt or of a layout this reader does not speak."""


class RegionMissingError(RegionError):
    """No region file (yet): the claim's processes have made no GPU call."""


@dataclass(frozen=True)
class DeviceUsage:
    """One GPU slice as the container's processes have used it."""

    index: int
    uuid: str
    memory_limit: int
    memory_used: int
    memory_peak: int
    rejected_allocations: int
    compute_percent: int
    compute_used_ns: int
    throttled_ns: int
    launches: int


@dataclass(frozen=True)
class ProcessSlot:
    """A process that has (or had) the GPU open in the container."""

    index: int
    pid: int
    start_time: int
    pid_ns: int
    generation: int
    alive: bool
    memory_used: tuple[int, ...]


@dataclass(frozen=True)
class RegionSnapshot:
    """A consistent-enough copy of the region: counters are read once each, without locks."""

    claim: str
    major: int
    minor: int
    created_ns: int
    devices: tuple[DeviceUsage, ...]
    slots: tuple[ProcessSlot, ...]

    @property
    def live_slots(self) -> tuple[ProcessSlot, ...]:
        return tuple(s for s in self.slots if s.alive)


def region_path(region_dir: str | os.PathLike[str]) -> Path:
    return Path(region_dir) / REGION_FILE


def _slot_locked(fd: int, slot: int) -> bool:
    probe = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, LOCK_BASE + slot, 1, 0)
    got = fcntl.fcntl(fd, fcntl.F_GETLK, probe)
    return _FLOCK.unpack(got)[0] != fcntl.F_UNLCK


def _process_key(proc: str, name: str) -> tuple[int, int, int] | None:
    """(PID namespace inode or 0 when unreadable, innermost pid, starttime) of the process
    /proc/<name>; None when it is gone or has exited. A namespace the agent may not read
    matches any slot: never declared dead."""
    try:
        with open(f"{proc}/{name}/stat", "rb") as f:
            stat = f.read()
        with open(f"{proc}/{name}/status", "rb") as f:
            status = f.read()
    except OSError:
        return None  # exited meanwhile
    fields = stat[stat.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X") and not _any_thread_runs(proc, name):
        return None  # exited: its memory is given back, only the entry waits to be reaped
    nspid = next((ln for ln in status.splitlines() if ln.startswith(b"NSpid:")), b"")
    inner = int(nspid.split()[-1]) if nspid else int(name)
    try:
        ns = os.stat(f"{proc}/{name}/ns/pid").st_ino
    except OSError:
        ns = 0
    return ns, inner, int(fields[19])


def _any_thread_runs(proc: str, name: str) -> bool:
    """Whether a thread of process /proc/<name> other than its leader still runs. A leader that
    left by SYS_exit reads "Z" while another thread keeps the process, its descriptors and its
    device memory: the process is alive while any of its threads is."""
    try:
        tids = os.listdir(f"{proc}/{name}/task")
    except OSError:
        return False
    for tid in tids:
        if tid == name:
            continue
        try:
            with open(f"{proc}/{name}/task/{tid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # exited meanwhile
        if stat[stat.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X"):
            return True
    return False


def _running(proc: str = "/proc") -> dict[tuple[int, int, int], int]:
    """Every running process: its `_process_key` -> its pid in `proc`."""
    seen: dict[tuple[int, int, int], int] = {}
    for name in os.listdir(proc):
        if name.isdigit() and (key := _process_key(proc, name)) is not None:
            seen[key] = int(name)
    return seen


def _owner_alive(running, pid: int, ns: int, start: int) -> bool:
    return (ns, pid, start) in running or (0, pid, start) in running


class Liveness:
    """Whether the owner of a slot whose lock is free still runs, asked across many regions and
    ticks (the collector keeps one; `tick()` starts each tick).

    The owner can drop its own lock and live on (a tenant's process can), and telling needs a
    search of /proc by namespace, pid and start time. Here that search runs at most once a
    tick for all regions, and an owner found is remembered by its pid on the host and checked
    there directly on later ticks (namespace, pid and start time read again: a guess, never
    trusted), so a tenant that drops its locks costs the agent three reads a tick, not a scan of
    every process on the node per region. Only what was asked in the last tick is remembered.
    """

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self._scan: dict[tuple[int, int, int], int] | None = None
        self._hosts: dict[tuple[int, int, int], int] = {}  # owner -> its pid in `proc`
        self._asked: set[tuple[int, int, int]] = set()

    def tick(self) -> None:
        self._scan = None
        self._hosts = {k: v for k, v in self._hosts.items() if k in self._asked}
        self._asked = set()

    def alive(self, pid: int, ns: int, start: int) -> bool:
        owner = (ns, pid, start)
        self._asked.add(owner)
        host = self._hosts.get(owner)
        if host is not None and _process_key(self.proc, str(host)) in (owner, (0, pid, start)):
            return True
        if self._scan is None:
            self._scan = _running(self.proc)
        host = self._scan.get(owner, self._scan.get((0, pid, start)))
        if host is None:
            return False
        self._hosts[owner] = host
        return True


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def _check_header(buf: bytes, path: str | Path) -> tuple[int, ...]:
    if len(buf) < REGION_SIZE:
        raise RegionError(f"{path}: corrupt region (size {len(buf)}, expected {REGION_SIZE})")
    fields = HEADER.unpack_from(buf, 0)
    magic, major, _minor, header_size, devices, slots = fields[:6]
    if magic != MAGIC:
        raise RegionError(f"{path}: not a Tranche region (magic {magic:#x})")
    if major != MAJOR or header_size != REGION_SIZE:
        raise RegionError(
            f"{path}: region layout {major}.{_minor} (size {header_size}) is not {MAJOR}.x"
        )
    if devices > MAX_DEVICES or slots != MAX_SLOTS:
        raise RegionError(f"{path}: corrupt region ({devices} devices, {slots} slots)")
    return fields


def read_region(
    region_dir: str | os.PathLike[str], liveness: Liveness | None = None
) -> RegionSnapshot:
    """Snapshot the region in region_dir; raises RegionError when absent or not readable.
    `liveness`: what tells a slot's owner alive when its lock is free (a new one: this call's)."""
    path = os.path.join(region_dir, REGION_FILE)  # a str: this runs per claim every tick
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise RegionMissingError(f"{path}: no region yet") from exc
    except OSError as exc:
        raise RegionError(f"{path}: cannot open region: {exc.strerror}") from exc
    try:
        buf = os.pread(fd, REGION_SIZE, 0)
        fields = _check_header(buf, path)
        _magic, major, minor, _hs, ndev, _ns, _rsv, created, claim = fields
        devices = []
        for i in range(ndev):
            rec = DEVICE.unpack_from(buf, DEVICES_OFFSET + i * DEVICE_SIZE)
            uuid, limit, used, rejected, peak, pct, _r, _tok, _refill, cused, throttled, n = rec
            devices.append(
                DeviceUsage(i, _cstr(uuid), limit, used, peak, rejected, pct, cused, throttled, n)
            )
        slots = []
        liveness = Liveness() if liveness is None else liveness
        for i, taken in enumerate(_PIDS.unpack_from(buf, SLOTS_OFFSET)):
            if taken == 0:
                continue  # a free slot
            pid, gen, start, ns, *mem = SLOT.unpack_from(buf, SLOTS_OFFSET + i * SLOT_SIZE)
            alive = _slot_locked(fd, i) or liveness.alive(pid, ns, start)
            slots.append(ProcessSlot(i, pid, start, ns, gen, alive, tuple(mem[:ndev])))
        return RegionSnapshot(_cstr(claim), major, minor, created, tuple(devices), tuple(slots))
    finally:
        os.close(fd)


@functools.cache  # find_library runs `ldconfig -p` in a child process: once per agent
def _libatomic() -> ctypes.CDLL:
    name = ctypes.util.find_library("atomic") or "libatomic.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError as exc:
        raise RegionError("reclaim needs libatomic.so.1 (package libatomic1)") from exc
    for fn in (lib.__atomic_fetch_sub_8, lib.__atomic_exchange_8):
        fn.restype = ctypes.c_uint64
        fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int]
    return lib


_SEQ_CST = 5


def reclaim_dead(region_dir: str | os.PathLike[str]) -> int:
    """Give back the memory charged to processes that are gone; returns bytes reclaimed.

    Safe to run at any time alongside live processes and peers doing the same: a slot is
    scrubbed only while holding its lock (which keeps other reclaimers out) and once no
    running process matches its owner (a live owner that dropped its lock keeps its charge);
    counters are changed with the same atomic operations the core uses. Idempotent.
    """
    path = region_path(region_dir)
    atomic = _libatomic()
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        _check_header(os.pread(fd, REGION_SIZE, 0), path)
        with mmap.mmap(fd, REGION_SIZE) as mm:
            base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
            total = 0
            running: dict[tuple[int, int, int], int] | None = None  # fresh: after the lock
            try:
                for i in range(MAX_SLOTS):
                    slot = SLOTS_OFFSET + i * SLOT_SIZE
                    if struct.unpack_from("<I", mm, slot)[0] == 0:
                        continue
                    try:
                        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, LOCK_BASE + i)
                    except OSError:
                        continue  # its process is alive
                    try:
                        pid, _gen, start, ns = struct.unpack_from("<IIQQ", mm, slot)
                        running = _running() if running is None else running
                        if pid == 0 or _owner_alive(running, pid, ns, start):
                            continue  # its owner dropped the lock but still runs
                        total += _scrub(atomic, base, slot)
                    finally:
                        fcntl.lockf(fd, fcntl.LOCK_UN, 1, LOCK_BASE + i)
            finally:
                del base  # release the buffer export before the mmap closes
            return total
    finally:
        os.close(fd)


def _scrub(atomic: ctypes.CDLL, base: int, slot: int) -> int:
    total = 0
    for d in range(MAX_DEVICES):
        held = atomic.__atomic_exchange_8(base + slot + SLOT_MEM_OFFSET + 8 * d, 0, _SEQ_CST)
        if held:
            dev_used = base + DEVICES_OFFSET + d * DEVICE_SIZE + MEM_USED_OFFSET
            atomic.__atomic_fetch_sub_8(dev_used, held, _SEQ_CST)
            total += held
    gen = ctypes.c_uint32.from_address(base + slot + 4)
    gen.value += 1  # only the lock holder writes a dead slot
    ctypes.c_uint32.from_address(base + slot).value = 0
    return total
