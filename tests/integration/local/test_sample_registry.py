"""`make run`'s sample registry (`python -m deploy.ociregistry samples`) serves the pre-flight
samples, read-only once they are in (#45: it took anonymous pushes and deletes), and stops with
its registry on SIGTERM, as the supervisor stops it at `make stop` (a handler that waited for
the registry deadlocked once, and `make stop` left the stack running)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess

import urllib3

from deploy.local import platform
from deploy.ociregistry.samples import REPOSITORY, SAMPLES, TAG, served
from tests.helpers.portal import free_port
from tests.helpers.wait import wait_for


def test_the_sample_registry_serves_and_stops_on_sigterm(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TRANCHE_SAMPLE_REGISTRY_PORT", str(free_port()))
    host = platform.sample_registry()
    proc = subprocess.Popen(
        platform.samples_argv(tmp_path), env={**os.environ, "PYTHONPATH": str(platform.REPO)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        wait_for(lambda: served(host), 120, "the sample registry to serve the samples")
        # #45: read-only once seeded: nobody on the node can push over or delete a sample
        http = urllib3.PoolManager(timeout=5, retries=False)
        wait_for(lambda: http.request("POST", f"http://{host}/v2/evil/blobs/uploads/").status
                 == 405, 10, "the sample registry to refuse pushes")  # fmt: skip
        manifest = f"http://{host}/v2/{REPOSITORY}/{SAMPLES[0].name}/manifests/{TAG}"
        assert http.request("DELETE", manifest).status == 405
        assert http.request("PUT", manifest, body=b"{}").status == 405
        assert served(host)  # reads still answered
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    port = int(host.rsplit(":", 1)[1])
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0  # the registry went with it
    assert b"pushed 127.0.0.1" in proc.stdout.read()
