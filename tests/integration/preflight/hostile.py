"""Hostile registries on loopback for pre-flight's tests (#28): each a real socket server a test
starts and stops. A silent listener, a byte-a-second sender, a recorder of what reached it, and
a front that forwards to the real test registry but can lie (another image's digest, a 401 whose
token realm points elsewhere)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import urllib3


@contextmanager
def silent_listener(held: list[socket.socket] | None = None) -> Iterator[str]:
    """Accepts connections (appended to `held`) and never answers; yields host:port."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held = [] if held is None else held
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


@contextmanager
def drip_sender(interval: float = 0.5, *, closing: bool = False) -> Iterator[str]:
    """Answers every connection with an endless HTTP header, one byte per `interval`; with
    `closing`, whole headers saying `Connection: close` at once, then an endless body so."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        payload = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100_000
        try:
            if closing:
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nConnection: close\r\n"
                    b"Content-Type: application/vnd.oci.image.manifest.v1+json\r\n\r\n"
                )
                payload = b"{" + b" " * 100_000
            for byte in payload:
                if stop.wait(interval):
                    break
                conn.sendall(bytes([byte]))
        except OSError:
            pass
        finally:
            conn.close()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        server.close()


@contextmanager
def http_server(handle: Callable[[BaseHTTPRequestHandler], None]) -> Iterator[tuple[str, list]]:
    """A threading HTTP server calling `handle(request)` for every GET; yields host:port and
    the list of paths it was asked for."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            return

        def do_GET(self) -> None:
            seen.append(self.path)
            handle(self)

        def do_PATCH(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen.append(f"PATCH {self.path}")
            handle(self)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def reply(req: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict | None = None):
    req.send_response(status)
    for key, value in (headers or {}).items():
        req.send_header(key, value)
    req.send_header("Content-Length", str(len(body)))
    req.end_headers()
    req.wfile.write(body)


def forward(req: BaseHTTPRequestHandler, upstream: str, headers: dict | None = None) -> None:
    """Answer with the real registry's answer, headers replaced or added by `headers`."""
    resp = urllib3.PoolManager().request(
        "GET", f"http://{upstream}{req.path}",
        headers={"Accept": req.headers.get("Accept", "*/*")}, preload_content=True,
    )  # fmt: skip
    keep = {
        k: resp.headers[k] for k in ("Content-Type", "Docker-Content-Digest") if k in resp.headers
    }
    reply(req, resp.status, resp.data, {**keep, **(headers or {})})


def elapsed(started: float) -> float:
    return time.monotonic() - started


# Manifests that pre-flight is sent: shared by the tests and bench/preflight_abuse.py.
def workload(*images: str, extra: str = "") -> str:
    containers = "\n".join(f"      - {{name: c{i}, image: {im}}}" for i, im in enumerate(images))
    return f"""apiVersion: apps/v1
kind: Deployment
metadata: {{name: app}}
spec:
  selector: {{matchLabels: {{app: a}}}}
  template:
    metadata: {{labels: {{app: a}}}}
    spec:
      resourceClaims: [{{name: gpu, resourceClaimTemplateName: tranche-v100-8g}}]
      containers:
{containers}
{extra}"""


def alias_bomb(levels: int) -> str:
    lines = ['    a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    for i in range(1, levels + 1):
        lines.append(f"    a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 10)}]")
    return (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\ndata:\n  x: y\nbomb:\n"
        + "\n".join(lines)
    )


def string_bomb(size: int, copies: int) -> str:
    """One long string and `copies` aliases of it: few nodes, but `size * copies` bytes."""
    aliases = ",".join(["*s"] * copies)
    return (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\ndata:\n"
        f"  a: &s {'x' * size}\n  b: [{aliases}]\n"
    )
