# ruff: noqa: N802  (method names are fixed by the gRPC services we implement)
"""gRPC servers the kubelet talks to: the DRA plugin socket and the registration socket.

The kubelet's plugin watcher finds `<registry>/<driver>-reg.sock`, calls `GetInfo` (we answer
type `DRAPlugin`, our driver name, the DRA socket path and the services we serve) and then
`NotifyRegistrationStatus`. It then calls `NodePrepareResources` / `NodeUnprepareResources` on
the DRA socket, in v1 or v1beta1 (same messages, v1beta1 lacks the share ID).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc

from nodeagent.draplugin.gen.dra.v1 import api_pb2 as v1
from nodeagent.draplugin.gen.dra.v1 import api_pb2_grpc as v1_grpc
from nodeagent.draplugin.gen.dra.v1beta1 import api_pb2 as v1beta1
from nodeagent.draplugin.gen.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from nodeagent.draplugin.gen.pluginregistration.v1 import api_pb2 as reg
from nodeagent.draplugin.gen.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from nodeagent.draplugin.prepare import PrepareError, Preparer
from nodeagent.slices import DRIVER

log = logging.getLogger(__name__)

SUPPORTED_SERVICES = ["v1.DRAPlugin", "v1beta1.DRAPlugin"]  # kubelet dra/*/types.go


PrepareFailed = Callable[[str, str, str], None]  # (namespace, claim name, error)


def _prepare_all(preparer: Preparer, claims, pb, failed: PrepareFailed | None = None) -> dict:
    """Prepare each claim independently: one bad claim must not fail the others. Each failure
    is also told to `failed` (the agent reports it to support)."""
    out = {}
    for c in claims:
        try:
            done = preparer.prepare(c.namespace, c.name, c.uid)
        except Exception as exc:
            if isinstance(exc, PrepareError):
                log.warning("prepare %s/%s (%s) failed: %s", c.namespace, c.name, c.uid, exc)
                error = str(exc)
            else:
                log.exception("prepare %s/%s (%s) crashed", c.namespace, c.name, c.uid)
                error = f"internal error: {exc}"
            out[c.uid] = pb.NodePrepareResourceResponse(error=error)
            if failed is not None:
                failed(c.namespace, c.name, error)
            continue
        devices = []
        for d in done.devices:
            fields = {
                "request_names": [d.request] if d.request else [],
                "pool_name": d.pool,
                "device_name": d.device,
                "cdi_device_ids": [d.cdi_id],
            }
            if pb is v1 and d.share_id:
                fields["share_id"] = d.share_id
            devices.append(pb.Device(**fields))
        out[c.uid] = pb.NodePrepareResourceResponse(devices=devices)
    return out


def _unprepare_all(preparer: Preparer, claims, pb) -> dict:
    out = {}
    for c in claims:
        try:
            preparer.unprepare(c.uid)
            out[c.uid] = pb.NodeUnprepareResourceResponse()
        except Exception as exc:
            log.exception("unprepare %s (%s) failed", c.name, c.uid)
            out[c.uid] = pb.NodeUnprepareResourceResponse(error=str(exc))
    return out


class DraV1(v1_grpc.DRAPluginServicer):
    def __init__(self, preparer: Preparer, failed: PrepareFailed | None = None) -> None:
        self.preparer, self.failed = preparer, failed

    def NodePrepareResources(self, request, context):
        return v1.NodePrepareResourcesResponse(
            claims=_prepare_all(self.preparer, request.claims, v1, self.failed)
        )

    def NodeUnprepareResources(self, request, context):
        return v1.NodeUnprepareResourcesResponse(
            claims=_unprepare_all(self.preparer, request.claims, v1)
        )


class DraV1beta1(v1beta1_grpc.DRAPluginServicer):
    def __init__(self, preparer: Preparer, failed: PrepareFailed | None = None) -> None:
        self.preparer, self.failed = preparer, failed

    def NodePrepareResources(self, request, context):
        return v1beta1.NodePrepareResourcesResponse(
            claims=_prepare_all(self.preparer, request.claims, v1beta1, self.failed)
        )

    def NodeUnprepareResources(self, request, context):
        return v1beta1.NodeUnprepareResourcesResponse(
            claims=_unprepare_all(self.preparer, request.claims, v1beta1)
        )


class Registration(reg_grpc.RegistrationServicer):
    """Answers the kubelet's plugin watcher; remembers whether registration succeeded."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.registered = threading.Event()
        self.error = ""

    def GetInfo(self, request, context):
        return reg.PluginInfo(
            type="DRAPlugin",
            name=DRIVER,
            endpoint=self.endpoint,
            supported_versions=SUPPORTED_SERVICES,
        )

    def NotifyRegistrationStatus(self, request, context):
        if request.plugin_registered:
            log.info("kubelet registered plugin %s", DRIVER)
            self.error = ""
            self.registered.set()
        else:
            self.error = request.error
            self.registered.clear()
            log.error("kubelet refused plugin %s: %s", DRIVER, request.error)
        return reg.RegistrationStatusResponse()


@dataclass(frozen=True)
class Sockets:
    """Where the kubelet looks: DRA socket under plugins/<driver>, registration under
    plugins_registry (defaults of /var/lib/kubelet; overridable for tests and kwok nodes)."""

    plugin: Path
    registry: Path

    @classmethod
    def under(cls, kubelet_dir: Path) -> Sockets:
        return cls(
            plugin=kubelet_dir / "plugins" / DRIVER / "dra.sock",
            registry=kubelet_dir / "plugins_registry" / f"{DRIVER}-reg.sock",
        )


SUN_PATH_MAX = 107  # sockaddr_un.sun_path holds 108 bytes including the terminating NUL


def _bind(server: grpc.Server, path: Path) -> None:
    if len(os.fsencode(path)) > SUN_PATH_MAX:
        raise OSError(
            f"cannot listen on unix socket {path}: the path is {len(os.fsencode(path))} bytes, "
            f"sockets allow {SUN_PATH_MAX}; choose a shorter --kubelet-dir"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # a stale socket of a previous run would make bind fail
    if server.add_insecure_port(f"unix://{path}") == 0:
        raise OSError(f"cannot listen on unix socket {path}")


class PluginServer:
    """Both servers; `start()` returns once the sockets accept connections."""

    def __init__(
        self,
        preparer: Preparer,
        sockets: Sockets,
        workers: int = 4,
        on_prepare_failed: PrepareFailed | None = None,
    ) -> None:
        self.sockets = sockets
        self.registration = Registration(str(sockets.plugin))
        self._dra = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
        v1_grpc.add_DRAPluginServicer_to_server(DraV1(preparer, on_prepare_failed), self._dra)
        v1beta1_grpc.add_DRAPluginServicer_to_server(
            DraV1beta1(preparer, on_prepare_failed), self._dra
        )
        self._reg = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
        reg_grpc.add_RegistrationServicer_to_server(self.registration, self._reg)

    def start(self) -> None:
        _bind(self._dra, self.sockets.plugin)
        self._dra.start()
        # Registration last: the kubelet may call the DRA socket as soon as it sees this one.
        _bind(self._reg, self.sockets.registry)
        self._reg.start()
        log.info("DRA plugin on %s, registration on %s", *self.sockets.__dict__.values())

    def stop(self, grace: float = 2.0) -> None:
        self._reg.stop(grace).wait()
        self._dra.stop(grace).wait()
        for p in (self.sockets.registry, self.sockets.plugin):
            if os.path.exists(p):
                p.unlink()
