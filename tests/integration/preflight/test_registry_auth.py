"""Registry auth: a token service and a registry front that demands a bearer token, as Docker Hub
does (401 + WWW-Authenticate: Bearer realm=...), and one that demands basic auth. The front
forwards to the real loopback registry; credentials come from the platform's docker config."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import urllib3

from portal.preflight.scanning import scan_image

USER, PASSWORD, TOKEN = "platform", "s3cret-pull", "tok-123"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


def front(upstream: str, scheme: str) -> ThreadingHTTPServer:
    http = urllib3.PoolManager()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            return

        def do_GET(self) -> None:
            host = f"127.0.0.1:{self.server.server_address[1]}"
            if self.path.startswith("/token"):
                ok = self.headers.get("Authorization") == BASIC and "scope=repository" in self.path
                self._reply(
                    200 if ok else 401, json.dumps({"token": TOKEN}).encode() if ok else b""
                )
                return
            wanted = f"Bearer {TOKEN}" if scheme == "bearer" else BASIC
            if self.headers.get("Authorization") != wanted:
                challenge = (
                    f'Bearer realm="http://{host}/token",service="{host}"'
                    if scheme == "bearer" else 'Basic realm="registry"'
                )  # fmt: skip
                self._reply(401, b"", {"WWW-Authenticate": challenge})
                return
            resp = http.request(
                "GET", f"http://{upstream}{self.path}",
                headers={"Accept": self.headers.get("Accept", "*/*")}, preload_content=True,
            )  # fmt: skip
            keep = ("Content-Type", "Docker-Content-Digest")
            self._reply(
                resp.status, resp.data, {k: resp.headers[k] for k in keep if k in resp.headers}
            )

        def _reply(self, status: int, body: bytes, headers: dict | None = None) -> None:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


@pytest.fixture(params=["bearer", "basic"])
def guarded(request, oci_registry, cuda_images, settings, tmp_path) -> Iterator[str]:
    server = front(oci_registry.host, request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host = f"127.0.0.1:{server.server_address[1]}"
    secret = tmp_path / "config.json"
    secret.write_text(json.dumps({"auths": {host: {"auth": base64.b64encode(
        f"{USER}:{PASSWORD}".encode()).decode()}}}))  # fmt: skip
    settings.PREFLIGHT_PLAIN_HTTP_REGISTRIES = ["127.0.0.1"]
    settings.PREFLIGHT_ALLOWED_REGISTRIES = ["127.0.0.1"]
    settings.PREFLIGHT_PULL_SECRET = str(secret)
    yield cuda_images["cu12"].replace(oci_registry.host, host)
    server.shutdown()
    server.server_close()


@pytest.mark.django_db
def test_pull_secret_opens_a_guarded_registry(guarded, settings) -> None:
    found = scan_image(guarded)
    assert found.error == ""
    assert 70 in found.sass

    settings.PREFLIGHT_PULL_SECRET = ""
    refused = scan_image(guarded.replace(":1.0", "@" + found.digest))
    assert refused.error.startswith("The registry 127.0.0.1:")
    assert "needs a login" in refused.error or "refused a pull token" in refused.error
