"""The DRA plugin called over real unix-socket gRPC exactly as the kubelet does: the plugin
watcher's registration handshake, then prepare, repeat prepare, unprepare, prepare again.

The claims come from a dict of ResourceClaim objects in the API server's JSON shape (the
plugin's one input besides the kubelet); the cluster tier runs the same path against the real
API server and scheduler.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import grpc
import pytest

from nodeagent.draplugin.gen.dra.v1 import api_pb2 as v1
from nodeagent.draplugin.gen.dra.v1 import api_pb2_grpc as v1_grpc
from nodeagent.draplugin.gen.dra.v1beta1 import api_pb2 as v1beta1
from nodeagent.draplugin.gen.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from nodeagent.draplugin.gen.pluginregistration.v1 import api_pb2 as reg
from nodeagent.draplugin.gen.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from nodeagent.draplugin.prepare import Layout, PrepareError, Preparer
from nodeagent.draplugin.server import PluginServer, Sockets
from tests.helpers.gpus import NODE, allocated_claim

UID = "6a1f3d0c-1111-4a3b-9c2d-000000000001"


@pytest.fixture
def claims() -> dict:
    return {("acme-ml", "pod-a-gpu-x7k2"): allocated_claim(UID)}


@pytest.fixture
def sockdir():
    """Unix socket paths are capped at 107 bytes; pytest's tmp_path can be longer."""
    path = Path(tempfile.mkdtemp(prefix="tr-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(
        state_dir=tmp_path / "state",
        cdi_dir=tmp_path / "cdi",
        core_library=tmp_path / "libtranche.so",
        simulate=True,
    )


def _server(gpus, layout, claims, tmp_path) -> PluginServer:
    preparer = Preparer(NODE, gpus, layout, lambda ns, name: claims[(ns, name)])
    server = PluginServer(preparer, Sockets.under(tmp_path))
    server.start()
    return server


def _claim(uid: str = UID, name: str = "pod-a-gpu-x7k2"):
    return v1.Claim(namespace="acme-ml", uid=uid, name=name)


def test_kubelet_handshake_prepare_unprepare(gpus, layout, claims, sockdir):
    server = _server(gpus, layout, claims, sockdir)
    try:
        # 1. The plugin watcher dials the registration socket and asks who we are.
        with grpc.insecure_channel(f"unix://{server.sockets.registry}") as ch:
            info = reg_grpc.RegistrationStub(ch).GetInfo(reg.InfoRequest(), timeout=5)
            assert info.type == "DRAPlugin"
            assert info.name == "gpu.tranche.dev"
            assert info.endpoint == str(server.sockets.plugin)
            assert "v1.DRAPlugin" in info.supported_versions
            reg_grpc.RegistrationStub(ch).NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=True), timeout=5
            )
        assert server.registration.registered.is_set()

        # 2. The kubelet dials the endpoint it was given and prepares the pod's claim.
        with grpc.insecure_channel(f"unix://{info.endpoint}") as ch:
            dra = v1_grpc.DRAPluginStub(ch)
            first = dra.NodePrepareResources(
                v1.NodePrepareResourcesRequest(claims=[_claim()]), timeout=5
            )
            result = first.claims[UID]
            assert result.error == ""
            (device,) = result.devices
            assert (device.pool_name, device.device_name) == (NODE, "gpu-1")
            assert device.cdi_device_ids == [f"tranche.dev/gpu={UID}-gpu-1"]
            assert device.share_id == "3f1c0d2e-8f43-4d8e-9b8c-2a1d5e6f7a8b"
            assert list(device.request_names) == ["gpu"]

            config = layout.config_file(UID)
            assert stat.S_IMODE(config.stat().st_mode) == 0o444
            text = config.read_text()
            assert f"memory_bytes = {8 * 1024**3}" in text
            assert "compute_percent = 25" in text
            assert "GPU-00000000-0000-0000-0000-000000000001" in text
            spec_file = layout.cdi_dir / f"tranche.dev-gpu_{UID}.json"
            before = spec_file.stat().st_mtime_ns

            # 3. A repeat (kubelet retry) answers the same and rewrites nothing.
            again = dra.NodePrepareResources(
                v1.NodePrepareResourcesRequest(claims=[_claim()]), timeout=5
            )
            assert again == first
            assert spec_file.stat().st_mtime_ns == before

            # 4. Unprepare removes spec, config and region; a repeat is a success too.
            for _ in range(2):
                gone = dra.NodeUnprepareResources(
                    v1.NodeUnprepareResourcesRequest(claims=[_claim()]), timeout=5
                )
                assert gone.claims[UID].error == ""
            assert not spec_file.exists()
            assert not config.exists()
            assert not layout.region_dir(UID).exists()

            # 5. Prepare after unprepare prepares afresh.
            third = dra.NodePrepareResources(
                v1.NodePrepareResourcesRequest(claims=[_claim()]), timeout=5
            )
            assert third == first
            assert spec_file.exists()
    finally:
        server.stop()


def test_restart_answers_from_checkpoint_without_duplicating(gpus, layout, claims, sockdir):
    server = _server(gpus, layout, claims, sockdir)
    with grpc.insecure_channel(f"unix://{server.sockets.plugin}") as ch:
        first = v1_grpc.DRAPluginStub(ch).NodePrepareResources(
            v1.NodePrepareResourcesRequest(claims=[_claim()]), timeout=5
        )
    server.stop()
    claims.clear()  # after a restart the answer must come from the checkpoint alone
    server = _server(gpus, layout, claims, sockdir)
    try:
        with grpc.insecure_channel(f"unix://{server.sockets.plugin}") as ch:
            again = v1_grpc.DRAPluginStub(ch).NodePrepareResources(
                v1.NodePrepareResourcesRequest(claims=[_claim()]), timeout=5
            )
        assert again == first
        assert len(os.listdir(layout.cdi_dir)) == 1
    finally:
        server.stop()


def test_bad_claim_fails_alone_and_v1beta1_works(gpus, layout, claims, sockdir):
    pending = allocated_claim("u-2")
    del pending["status"]["allocation"]
    pending["metadata"]["name"] = "pending"
    claims[("acme-ml", "pending")] = pending
    server = _server(gpus, layout, claims, sockdir)
    try:
        with grpc.insecure_channel(f"unix://{server.sockets.plugin}") as ch:
            resp = v1beta1_grpc.DRAPluginStub(ch).NodePrepareResources(
                v1beta1.NodePrepareResourcesRequest(
                    claims=[
                        v1beta1.Claim(namespace="acme-ml", uid=UID, name="pod-a-gpu-x7k2"),
                        v1beta1.Claim(namespace="acme-ml", uid="u-2", name="pending"),
                    ]
                ),
                timeout=5,
            )
        assert resp.claims[UID].error == ""
        assert resp.claims[UID].devices[0].device_name == "gpu-1"
        assert "is not allocated yet" in resp.claims["u-2"].error
    finally:
        server.stop()


def test_a_claim_on_a_failed_gpu_is_refused_until_it_is_healthy(gpus, layout, claims):
    """A scheduler whose slice view predates a device's taint can allocate the failed GPU; the
    plugin refuses to prepare it, so the pod never runs there, and prepares it once healthy."""
    failed: set[str] = {next(g.uuid for g in gpus if g.device_name == "gpu-1")}
    preparer = Preparer(NODE, gpus, layout, lambda ns, name: claims[(ns, name)], lambda: failed)
    with pytest.raises(PrepareError, match="has failed and is tainted"):
        preparer.prepare("acme-ml", "pod-a-gpu-x7k2", UID)
    assert preparer.checkpoint.get(UID) is None
    failed.clear()
    assert preparer.prepare("acme-ml", "pod-a-gpu-x7k2", UID).devices[0].device == "gpu-1"
