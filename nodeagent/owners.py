"""Which pod a process on the node belongs to, read from its cgroup membership.

The backstop must attribute every process NVML lists on a GPU, including processes that never
loaded the interception core (a static binary, a program that talks to the driver directly)
and so never appear in a claim's shared region. The kernel's cgroup record is the one trace of
a container's processes that the tenant cannot rewrite: environment, process names, sessions
and parents all can be. kubelet names each pod's cgroup after the pod UID, in both of its
drivers and on cgroup v1 and v2:

    cgroupfs: /kubepods/besteffort/pod1b2c3d4e-0000-4000-8000-000000000001/<container>
    systemd:  /kubepods.slice/kubepods-besteffort.slice/
              kubepods-besteffort-pod1b2c3d4e_0000_4000_8000_000000000001.slice/cri-…scope

A process outside every pod cgroup is the host's (the operator's tools, the driver's daemons)
and is not a tenant's; nor is a pod outside the tenant namespaces (`TenantPods`): the
operator's own GPU pods (burn-in, monitoring) are left alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from pathlib import Path

from tranche.names import LABEL_TENANT  # on every tenant namespace (controller/render/namespace.py)

log = logging.getLogger(__name__)

PROC = Path("/proc")
TICK = os.sysconf("SC_CLK_TCK")
_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
# "pod<uid>" as a whole path component (cgroupfs) or a systemd slice name's last part.
_POD = re.compile(rf"(?:^|/|-)pod({_UID})(?:\.slice)?(?=/|$)")


def pod_uid_from_cgroup(text: str) -> str | None:
    """The pod UID named by a /proc/<pid>/cgroup file's text, or None (not in a pod).

    Every hierarchy of one process names the same pod; the first line that names one wins."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        match = _POD.search(parts[2])
        if match:
            return match.group(1).replace("_", "-")
    return None


def pod_cgroup_paths(text: str) -> list[tuple[str, str, str]]:
    """(hierarchy id, controllers, the path down to the pod's own cgroup) for each line of a
    /proc/<pid>/cgroup text that names a pod: where the pod's whole cgroup can be acted on."""
    out = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and (match := _POD.search(parts[2])):
            out.append((parts[0], parts[1], parts[2][: match.end()]))
    return out


def cgroup_texts(pid: int, proc: Path = PROC) -> list[str]:
    """The /proc cgroup files of process `pid`: its own, then each of its threads'. A leader
    that left by SYS_exit while another thread keeps the process reads "Z" and, on cgroup v1,
    "/" in its own file: only its live threads still name the pod. [] when it is gone."""
    texts = []
    for path in (f"{proc}/{pid}/cgroup", *_thread_cgroups(pid, proc)):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, PermissionError):
            texts.append(Path(path).read_text())
    return texts


def _thread_cgroups(pid: int, proc: Path) -> list[str]:
    try:
        tids = os.listdir(f"{proc}/{pid}/task")
    except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
        return []
    return [f"{proc}/{pid}/task/{tid}/cgroup" for tid in tids if tid != str(pid)]


def pod_uid(pid: int, proc: Path = PROC) -> str | None:
    """The UID of the pod process `pid` runs in, named by the process or any of its threads
    (a tenant cannot move a thread out of its pod); None for a host process or one gone."""
    try:
        own = (proc / str(pid) / "cgroup").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        own = ""
    found = pod_uid_from_cgroup(own)
    if found is not None:
        return found
    for path in _thread_cgroups(pid, proc):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, PermissionError):
            found = pod_uid_from_cgroup(Path(path).read_text())
            if found is not None:
                return found
    return None


def ns_pid(pid: int, proc: Path = PROC) -> int:
    """`pid` as the process sees itself: in its innermost PID namespace (the last NSpid entry),
    which is what the interception core writes in a claim's region. `pid` itself when the
    kernel does not say (no such process, or a kernel without NSpid)."""
    try:
        for line in (proc / str(pid) / "status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
        pass
    return pid


def start_time(pid: int, proc: Path = PROC) -> int | None:
    """When process `pid` started (/proc/<pid>/stat field 22, clock ticks since boot), or None
    when it is gone. With the pid it names one process: a pid the kernel reuses comes with a
    new start time. Read per GPU process every tick: plain os calls, no Path."""
    try:
        fd = os.open(f"{proc}/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        raw = os.read(fd, 4096)
    except OSError:  # exited between open and read
        return None
    finally:
        os.close(fd)
    fields = raw[raw.rfind(b")") + 2 :].split()  # the name may hold ")": the last one ends it
    return int(fields[19]) if len(fields) > 19 else None


def boot_ticks() -> int:
    """Now, in the unit of a process's start time (clock ticks since boot, suspend included)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * TICK)


class Owners:
    """`owners(pid)`: (pod UID or None, pid in its own namespace) of a host process, as
    `pod_uid` and `ns_pid` say, looked up once per process.

    The backstop asks this of every process NVML lists, every tick; both answers are fixed for
    the life of a process (its PID namespace is chosen at fork; runc places it in the pod's
    cgroup before the container's program runs, and a container can neither leave its cgroup
    namespace's root nor write a cgroup outside it), so they are kept. A process is its pid
    and its start time: each call reads /proc/<pid>/stat again, and a pid the kernel reused is
    a new process, looked up afresh, never credited with the previous holder's pod. A pid
    reused during the lookup itself (its start time changed meanwhile) counts as gone this
    tick and is looked up again on the next. `keep_only` drops processes no longer listed."""

    def __init__(self, proc: Path = PROC) -> None:
        self.proc = proc
        self._known: dict[int, tuple[int, str | None, int]] = {}  # pid -> (start, pod, ns pid)

    def __call__(self, pid: int, listed_at: int | None = None) -> tuple[str | None, int]:
        """`listed_at` (`boot_ticks()` taken before NVML was asked for its processes): a process
        started after it is not the one NVML listed but the next holder of a reused pid, and
        is nobody's (it would be blamed, and stopped, for its predecessor's GPU use)."""
        start = start_time(pid, self.proc)
        if start is None:
            return None, pid  # gone: nobody's, as pod_uid and ns_pid say of it
        if listed_at is not None and start > listed_at:
            return None, pid
        known = self._known.get(pid)
        if known is not None and known[0] == start:
            return known[1], known[2]
        pod, inner = pod_uid(pid, self.proc), ns_pid(pid, self.proc)
        if start_time(pid, self.proc) != start:
            return None, pid  # exited, or its pid reused, while being read: next tick
        self._known[pid] = (start, pod, inner)
        return pod, inner

    def keep_only(self, pids: set[int]) -> None:
        """Forget every process but `pids` (those NVML lists now): the map stays bounded."""
        for pid in [p for p in self._known if p not in pids]:
            del self._known[pid]


class TenantPods:
    """`tenant_pods(pod_uid)`: True if that pod on this node runs in a tenant namespace, False
    if it is the operator's, None if the API server cannot tell now (not found, unreachable).

    Asked only when the backstop meets a pod process on a GPU the pod holds no claim on (rare),
    so it lists this node's pods then; answers are cached (a pod never changes namespace)."""

    def __init__(self, api_client, node: str) -> None:
        self._api = api_client
        self._node = node
        self._known: dict[str, bool] = {}
        self._lock = threading.Lock()

    def __call__(self, pod_uid: str) -> bool | None:
        with self._lock:
            if pod_uid in self._known:
                return self._known[pod_uid]
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        core = client.CoreV1Api(self._api)
        try:
            pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self._node}")
            ns = next((p.metadata.namespace for p in pods.items if p.metadata.uid == pod_uid), None)
            if ns is None:
                return None
            labels = core.read_namespace(ns).metadata.labels or {}
        except (ApiException, OSError) as exc:
            log.warning("cannot tell whose pod %s is: %s", pod_uid, exc)
            return None
        tenant = labels.get(LABEL_TENANT) == "true"
        with self._lock:
            self._known[pod_uid] = tenant
        return tenant
