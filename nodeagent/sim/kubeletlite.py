"""Simulation mode ("kubelet-lite") for a kwok node: plays the kubelet's part for GPU pods.

kwok marks pods Running but runs nothing. For each pod bound to our node whose claims are
allocated and reserved for it, kubelet-lite calls our own DRA plugin over its unix socket
exactly as the kubelet would, reads the CDI specs it named, and starts the pod's workload as a
local process with the CDI edits applied: the spec's environment, and its mounts bound for real
in a private mount namespace (`unshare --mount`), so the core is loaded through the mounted
/etc/ld.so.preload and reads its read-only config at the in-container path. When the pod goes
away the process is stopped and the claims unprepared. Level-triggered: every `sync()`
compares the pods the API server has with the processes we run.

Pod annotations choose the workload: tranche.dev/workload-memory-gib (default 1),
tranche.dev/workload-duty (0..1, default 0.5), tranche.dev/workload-seconds (default 0: forever),
tranche.dev/workload-host-memory-mib (host RAM to fill first, default 0).

The first container's `resources.limits.memory` is enforced with a memory cgroup
(`nodeagent.sim.cgroups`, v1 or v2). When the workload exits, its container status is reported
the way the kubelet reports it: `terminated` with the exit code, `OOMKilled` and 137 when the
kernel's OOM killer ended it; phase Failed/Succeeded for `restartPolicy: Never`, otherwise the
back-off state (`CrashLoopBackOff`, `lastState.terminated`); kubelet-lite does not restart it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from nodeagent.cdi import CDI_KIND, spec_path
from nodeagent.draplugin.gen.dra.v1 import api_pb2 as v1
from nodeagent.draplugin.gen.dra.v1 import api_pb2_grpc as v1_grpc
from nodeagent.sim.cgroups import OOM_EXIT_CODE, MemoryCgroup
from nodeagent.sim.podwatch import PodChanges
from tranche.pod_reasons import parse_quantity

log = logging.getLogger(__name__)
ANNOTATION = "tranche.dev/workload-"
RESYNC_SECONDS = 30.0  # the longest a missed pod change waits (see nodeagent/sim/podwatch.py)


@dataclass
class RunningPod:
    uid: str
    namespace: str
    name: str
    claims: list[tuple[str, str]]  # (claim name, claim uid)
    process: subprocess.Popen | None = None
    log_path: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    cgroup: MemoryCgroup | None = None
    container: str = ""
    restart_policy: str = "Always"
    reported: bool = False  # its exit has been written to the pod's status


def apply_cdi(spec: dict, device_names: list[str]) -> tuple[dict[str, str], list[dict]]:
    """Environment and mounts a runtime would apply for these devices of the spec."""
    env: dict[str, str] = {}
    mounts: list[dict] = []
    edits = [spec.get("containerEdits", {})] + [
        d.get("containerEdits", {}) for d in spec["devices"] if d["name"] in device_names
    ]
    for e in edits:
        for item in e.get("env", []):
            k, _, v = item.partition("=")
            env[k] = v
        mounts += e.get("mounts", [])
    return env, mounts


# The image reference grammar (distribution/reference), as the kubelet checks it before pulling.
_IMAGE_REF = re.compile(
    r"^(?:(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
    r"(?::[0-9]+)?)/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)


def invalid_image(image: str) -> str:
    """The kubelet's InvalidImageName message for an unparseable reference, or ""."""
    if image and _IMAGE_REF.match(image):
        return ""
    return (
        f'Failed to apply default image tag "{image}": couldn\'t parse image name "{image}": '
        "invalid reference format"
    )


def launch_script(mounts: list[dict], command: list[str], cgroup_procs: Path | None = None) -> str:
    """Shell run inside `unshare --mount`: join the pod's memory cgroup (first, so everything
    after counts), bind each mount (preload last, so nothing before the workload loads the
    core), then exec the workload."""
    lines = ["set -e"]
    if cgroup_procs is not None:
        lines.append(f"echo $$ > {shlex.quote(str(cgroup_procs))}")
    lines.append("mount --make-rprivate /")
    ordered = sorted(mounts, key=lambda m: m["containerPath"] == "/etc/ld.so.preload")
    for m in ordered:
        host, target = shlex.quote(m["hostPath"]), shlex.quote(m["containerPath"])
        is_dir = Path(m["hostPath"]).is_dir()
        # Mount points must exist; they are created empty on the host (an empty
        # /etc/ld.so.preload preloads nothing), and only the private namespace sees the content.
        lines.append(
            f"mkdir -p {target}"
            if is_dir
            else f"mkdir -p $(dirname {target}) && [ -e {target} ] || : > {target}"
        )
        lines.append(f"mount --bind {host} {target}")
        if "ro" in m.get("options", []):
            lines.append(f"mount -o remount,bind,ro {target}")
    lines.append("exec " + " ".join(shlex.quote(c) for c in command))
    return "\n".join(lines)


class KubeletLite:
    """Runs GPU pods of one kwok node as local processes on the simulated GPU."""

    def __init__(
        self,
        api_client,
        node: str,
        *,
        plugin_socket: Path,
        cdi_dir: Path,
        sim_env: dict[str, str],
        log_dir: Path,
    ) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.resource = client.ResourceV1Api(api_client)
        self.node = node
        self.plugin_socket = plugin_socket
        self.cdi_dir = cdi_dir
        self.sim_env = sim_env
        self.log_dir = log_dir
        self.pods: dict[str, RunningPod] = {}
        self.log_server = None
        # The node's pods are listed when the watch saw a change, while a pod waits to start,
        # and every RESYNC_SECONDS; a tick with none of these only checks local processes.
        self.changes = PodChanges(self.core, node)
        self._listed_at = float("-inf")
        self._waiting = False

    def _json(self, resp) -> dict:
        return json.loads(resp.data)

    def _claims_of(self, pod: dict) -> list[tuple[str, str]] | None:
        """(name, uid) of each claim, or None while any is not yet allocated/reserved."""
        ns = pod["metadata"]["namespace"]
        statuses = {
            s["name"]: s.get("resourceClaimName")
            for s in pod["status"].get("resourceClaimStatuses", [])
        }
        out = []
        for ref in pod["spec"].get("resourceClaims", []):
            name = ref.get("resourceClaimName") or statuses.get(ref["name"])
            if not name:
                return None
            claim = self._json(
                self.resource.read_namespaced_resource_claim(name, ns, _preload_content=False)
            )
            status = claim.get("status", {})
            reserved = {r.get("uid") for r in status.get("reservedFor", [])}
            if not status.get("allocation") or pod["metadata"]["uid"] not in reserved:
                return None
            out.append((name, claim["metadata"]["uid"]))
        return out

    def serve_logs(self, tls_dir: Path) -> None:
        """Serve the kubelet's container-log endpoint and point the node at it."""
        from nodeagent.sim.logserver import LogServer, point_node_at

        self.log_server = LogServer(self._log_of, tls_dir)
        self.log_server.start()
        point_node_at(self.core, self.node, self.log_server.port)
        log.info("serving container logs on 127.0.0.1:%d", self.log_server.port)

    def _log_of(self, namespace: str, pod: str) -> Path | None:
        """The newest output file of a pod run on this node (kept after it stops)."""
        found = sorted(
            self.log_dir.glob(f"{namespace}_{pod}_*.log"), key=lambda p: p.stat().st_mtime
        )
        return found[-1] if found else None

    def register(self, registry_socket: Path) -> None:
        """The plugin watcher's handshake: GetInfo, then NotifyRegistrationStatus."""
        from nodeagent.draplugin.gen.pluginregistration.v1 import api_pb2 as reg
        from nodeagent.draplugin.gen.pluginregistration.v1 import api_pb2_grpc as reg_grpc

        with grpc.insecure_channel(f"unix://{registry_socket}") as ch:
            stub = reg_grpc.RegistrationStub(ch)
            info = stub.GetInfo(reg.InfoRequest(), timeout=5)
            ok = info.type == "DRAPlugin" and "v1.DRAPlugin" in info.supported_versions
            self.plugin_socket = Path(info.endpoint)
            stub.NotifyRegistrationStatus(
                reg.RegistrationStatus(
                    plugin_registered=ok, error="" if ok else "v1.DRAPlugin not offered"
                ),
                timeout=5,
            )

    def _rpc(self) -> v1_grpc.DRAPluginStub:
        channel = grpc.insecure_channel(f"unix://{self.plugin_socket}")
        return v1_grpc.DRAPluginStub(channel)

    def _start(self, pod: dict, claims: list[tuple[str, str]]) -> RunningPod:
        meta = pod["metadata"]
        ns = meta["namespace"]
        running = RunningPod(meta["uid"], ns, meta["name"], claims)
        container = pod["spec"]["containers"][0]
        running.container = container["name"]
        bad_image = invalid_image(container.get("image", ""))
        if bad_image:  # the kubelet stops here, before preparing anything, and says why
            waiting = {"reason": "InvalidImageName", "message": bad_image}
            self._patch_container(running, "Pending", {"waiting": waiting})
            running.reported, running.claims = True, []  # nothing prepared, nothing to undo
            return running
        resp = self._rpc().NodePrepareResources(
            v1.NodePrepareResourcesRequest(
                claims=[v1.Claim(namespace=ns, name=n, uid=u) for n, u in claims]
            ),
            timeout=10,
        )
        env = dict(self.sim_env)
        mounts: list[dict] = []
        for _, uid in claims:
            result = resp.claims[uid]
            if result.error:
                raise RuntimeError(f"prepare of claim {uid} failed: {result.error}")
            spec = json.loads(spec_path(self.cdi_dir, uid).read_text())
            names = [
                i.split("=", 1)[1]
                for d in result.devices
                for i in d.cdi_device_ids
                if i.startswith(CDI_KIND + "=")
            ]
            e, m = apply_cdi(spec, names)
            env.update(e)
            mounts += m
        ann = meta.get("annotations") or {}
        command = [
            sys.executable, "-m", "nodeagent.sim.workload",
            "--memory-gib", ann.get(ANNOTATION + "memory-gib", "1"),
            "--duty", ann.get(ANNOTATION + "duty", "0.5"),
            "--seconds", ann.get(ANNOTATION + "seconds", "0"),
            "--host-memory-mib", ann.get(ANNOTATION + "host-memory-mib", "0"),
        ]  # fmt: skip
        running.restart_policy = pod["spec"].get("restartPolicy", "Always")
        limit = container.get("resources", {}).get("limits", {}).get("memory")
        if limit:
            running.cgroup = MemoryCgroup(meta["uid"], int(parse_quantity(limit)))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        running.log_path = self.log_dir / f"{ns}_{meta['name']}_{meta['uid']}.log"
        out = open(running.log_path, "ab")  # noqa: SIM115  (owned by the child process)
        running.env = env
        running.process = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             launch_script(mounts, command, running.cgroup.procs if running.cgroup else None)],
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                 "PYTHONPATH": str(Path(__file__).resolve().parents[2]), **env},
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        out.close()
        log.info("started workload of pod %s/%s (pid %d)", ns, meta["name"], running.process.pid)
        return running

    def _stop(self, running: RunningPod) -> None:
        p = running.process
        if p is not None and p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self._rpc().NodeUnprepareResources(
            v1.NodeUnprepareResourcesRequest(
                claims=[
                    v1.Claim(namespace=running.namespace, name=n, uid=u) for n, u in running.claims
                ]
            ),
            timeout=10,
        )
        if running.cgroup:
            running.cgroup.remove()
        log.info("stopped pod %s/%s and unprepared its claims", running.namespace, running.name)

    def _patch_container(self, running: RunningPod, phase: str, state: dict, **more) -> None:
        status = {"name": running.container, "ready": False, "image": "", "imageID": ""}
        status.update(state=state, **more)
        body = {"status": {"phase": phase, "containerStatuses": [status]}}
        self.core.patch_namespaced_pod_status(running.name, running.namespace, body)

    def _report_exit(self, running: RunningPod) -> None:
        """Write the container's end to the pod's status, as the kubelet would."""
        code = running.process.returncode if running.process else 0
        code = 128 - code if code < 0 else code  # killed by signal N: the runtime says 128 + N
        oom = bool(running.cgroup and running.cgroup.oom_kills())
        if oom:
            code = OOM_EXIT_CODE
        reason = "OOMKilled" if oom else ("Completed" if code == 0 else "Error")
        terminated = {"exitCode": code, "reason": reason}
        status: dict = {}
        if running.restart_policy == "Never" or (
            running.restart_policy == "OnFailure" and code == 0
        ):
            phase = "Succeeded" if code == 0 else "Failed"
            status.update(state={"terminated": terminated}, restartCount=0)
        else:
            phase = "Running"
            waiting = {"reason": "CrashLoopBackOff", "message": f"back-off restarting {reason}"}
            status.update(
                state={"waiting": waiting}, lastState={"terminated": terminated}, restartCount=1
            )
        self._patch_container(running, phase, status.pop("state"), **status)
        running.reported = True
        log.info(
            "pod %s/%s: container exited %d (%s)", running.namespace, running.name, code, reason
        )

    def sync(self) -> None:
        """One level-triggered pass: start what should run, stop what should not, report the
        exits of workloads. The node's pods are listed only when something may have changed
        (see `self.changes`); otherwise only the local processes are checked."""
        now = time.monotonic()
        if self.changes.changed.is_set() or self._waiting or now - self._listed_at > RESYNC_SECONDS:
            self.changes.changed.clear()  # before the LIST: a change during it lists again
            self._sync_listed()
            self._listed_at = now
        else:
            self._report_exits()

    def _sync_listed(self) -> None:
        pods = self._json(
            self.core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={self.node}", _preload_content=False
            )
        )["items"]
        wanted = {}
        for pod in pods:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") or pod["status"].get("phase") in (
                "Succeeded",
                "Failed",
            ):
                continue
            if not pod["spec"].get("resourceClaims"):
                continue
            wanted[meta["uid"]] = pod
        for uid in list(self.pods):
            if uid not in wanted:
                self._stop(self.pods.pop(uid))
        self._report_exits()
        for uid, pod in wanted.items():
            if uid in self.pods:
                continue
            try:
                claims = self._claims_of(pod)
                if claims is not None:
                    self.pods[uid] = self._start(pod, claims)
            except Exception as exc:
                log.warning(
                    "pod %s/%s not started yet: %s",
                    pod["metadata"]["namespace"],
                    pod["metadata"]["name"],
                    exc,
                )
        self._waiting = any(uid not in self.pods for uid in wanted)

    def _report_exits(self) -> None:
        for running in self.pods.values():
            if running.process and running.process.poll() is not None and not running.reported:
                try:
                    self._report_exit(running)
                except Exception as exc:  # the next sync retries
                    log.warning(
                        "pod %s/%s: exit not reported: %s", running.namespace, running.name, exc
                    )

    def stop_all(self) -> None:
        self.changes.stop()
        for uid in list(self.pods):
            self._stop(self.pods.pop(uid))
        if self.log_server is not None:
            self.log_server.stop()
