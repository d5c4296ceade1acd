"""The kubelet's container-log endpoint for simulated pods, so `kubectl logs` works on kwok nodes.

kube-apiserver serves `kubectl logs` by calling the node's kubelet at
`https://<InternalIP>:<status.daemonEndpoints.kubeletEndpoint.Port>/containerLogs/<ns>/<pod>/<c>`
with its kubelet client certificate. Kubelet-lite serves that path over TLS with a serving
certificate of the cluster's CA, accepts only clients with a certificate of that CA, answers
with the workload's output file, and points its node's kubelet endpoint at its own port.
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger(__name__)


def tls_context(tls_dir: Path) -> ssl.SSLContext:
    """Serving cert `kubelet.crt`/`kubelet.key`, clients verified against `ca.crt`."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tls_dir / "kubelet.crt", tls_dir / "kubelet.key")
    ctx.load_verify_locations(tls_dir / "ca.crt")
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def tail_lines(data: bytes, count: int | None) -> bytes:
    if count is None:
        return data
    lines = data.splitlines(keepends=True)
    return b"".join(lines[-count:]) if count > 0 else b""


class LogServer:
    """Serves `/containerLogs/<ns>/<pod>/<container>` from `find_log(ns, pod)`'s file."""

    def __init__(
        self, find_log: Callable[[str, str], Path | None], tls_dir: Path, port: int = 0
    ) -> None:
        finder = find_log

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                parts = url.path.strip("/").split("/")
                if len(parts) != 4 or parts[0] != "containerLogs":
                    self.send_error(404, "only /containerLogs/<ns>/<pod>/<container> is served")
                    return
                path = finder(parts[1], parts[2])
                if path is None or not path.exists():
                    self.send_error(404, f"no output of pod {parts[1]}/{parts[2]} on this node")
                    return
                query = parse_qs(url.query)
                tail = int(query["tailLines"][0]) if "tailLines" in query else None
                body = tail_lines(path.read_bytes(), tail)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, fmt: str, *args) -> None:
                log.debug("log server: " + fmt, *args)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.socket = tls_context(tls_dir).wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="logs", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def point_node_at(core_api, node: str, port: int) -> None:
    """Make the API server reach this node's kubelet API at `port` (kwok leaves it unset)."""
    body = {"status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}}
    core_api.patch_node_status(node, body)
