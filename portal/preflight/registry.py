"""Reading an image from its OCI registry, bounded, to find the CUDA code its files carry.

Distribution API only (manifest, then each layer blob streamed); anonymous, basic, or bearer-token
auth (the token realm named by `WWW-Authenticate`), with credentials from a docker config file the
platform configures (PREFLIGHT_PULL_SECRET). Nothing from the image is executed or written to disk:
layers are decompressed in memory as a stream, ELF files are parsed by `fatbin.py`.

Bounds: compressed bytes fetched and uncompressed bytes read per image; when either is reached
the scan stops and says so (a layer bomb stops at the uncompressed bound). Every request has a
connect/read timeout and the whole scan a deadline, so a registry that hangs gives a verdict.
"""

from __future__ import annotations

import base64
import json
import re
import tarfile
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

import urllib3

from portal.preflight.facts import ImageFacts
from portal.preflight.fatbin import GpuCode, gpu_code_of, is_elf

MANIFEST_TYPES = ", ".join([
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
])  # fmt: skip
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
MAX_ELF_BYTES = 512 * 1024 * 1024
INFLATE_STEP = 4 * 1024 * 1024


class ImageError(Exception):
    """The image could not be read; the message is for the tenant."""


class BoundReachedError(Exception):
    """The per-image byte bound was reached."""


@dataclass(frozen=True)
class ImageRef:
    registry: str
    repository: str
    reference: str

    @property
    def text(self) -> str:
        sep = "@" if self.reference.startswith("sha256:") else ":"
        return f"{self.registry}/{self.repository}{sep}{self.reference}"


def parse_image(image: str) -> ImageRef:
    """`ollama/ollama:0.24.0` or `127.0.0.1:5000/x/y@sha256:...` -> registry, repository, tag."""
    if not re.fullmatch(r"[A-Za-z0-9._:/@+-]{1,512}", image):
        raise ImageError(f"{image!r} is not an image reference.")
    rest, reference = image, "latest"
    if "@" in rest:
        rest, reference = rest.split("@", 1)
    elif ":" in rest.rsplit("/", 1)[-1]:
        rest, reference = rest.rsplit(":", 1)
    first, _, remainder = rest.partition("/")
    if remainder and ("." in first or ":" in first or first == "localhost"):
        registry, repository = first, remainder
    else:
        registry, repository = "registry-1.docker.io", rest
        if "/" not in repository:
            repository = f"library/{repository}"
    return ImageRef(registry, repository, reference)


@dataclass
class Limits:
    compressed_bytes: int = 2 * 1024**3
    uncompressed_bytes: int = 4 * 1024**3
    deadline_s: float = 120.0
    timeout_s: float = 10.0


@dataclass
class RegistryClient:
    """One image's reads, with its auth state and byte counters."""

    ref: ImageRef
    limits: Limits
    credentials: dict[str, tuple[str, str]] = field(default_factory=dict)
    plain_http: frozenset[str] = frozenset()
    fetched: int = 0
    unpacked_total: int = 0
    token: str = ""

    def __post_init__(self) -> None:
        timeout = urllib3.Timeout(connect=self.limits.timeout_s, read=self.limits.timeout_s)
        self.http = urllib3.PoolManager(timeout=timeout, retries=False)
        self.started = time.monotonic()
        host = self.ref.registry
        scheme = (
            "http" if host in self.plain_http or host.split(":")[0] in self.plain_http else "https"
        )
        self.base = f"{scheme}://{host}/v2/{self.ref.repository}"

    def _check_deadline(self) -> None:
        if time.monotonic() - self.started > self.limits.deadline_s:
            raise ImageError(
                f"The registry {self.ref.registry} took longer than {self.limits.deadline_s:.0f}s."
            )

    def _headers(self, accept: str = "") -> dict[str, str]:
        headers = {"Accept": accept} if accept else {}
        if self.token:
            headers["Authorization"] = self.token
        return headers

    def _authenticate(self, challenge: str) -> None:
        user_pass = self.credentials.get(self.ref.registry)
        scheme, _, params = challenge.partition(" ")
        if scheme.lower() == "basic":
            if not user_pass:
                raise ImageError(f"The registry {self.ref.registry} needs a login; none is set.")
            raw = f"{user_pass[0]}:{user_pass[1]}".encode()
            self.token = "Basic " + base64.b64encode(raw).decode()
            return
        fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
        if scheme.lower() != "bearer" or "realm" not in fields:
            raise ImageError(f"The registry {self.ref.registry} asks for unknown auth: {scheme}.")
        query = {
            "service": fields.get("service", ""),
            "scope": f"repository:{self.ref.repository}:pull",
        }
        headers = {}
        if user_pass:
            headers = urllib3.make_headers(basic_auth=f"{user_pass[0]}:{user_pass[1]}")
        resp = self._request("GET", fields["realm"], fields=query, headers=headers, auth=False)
        body = json.loads(resp.data[:65536] or b"{}")
        token = body.get("token") or body.get("access_token")
        if resp.status != 200 or not token:
            raise ImageError(
                f"The registry {self.ref.registry} refused a pull token ({resp.status})."
            )
        self.token = f"Bearer {token}"

    def _request(
        self, method: str, url: str, *, auth: bool = True, stream: bool = False, **kw: Any
    ):
        self._check_deadline()
        try:
            resp = self.http.request(method, url, preload_content=not stream, redirect=True, **kw)
        except urllib3.exceptions.TimeoutError as exc:
            raise ImageError(
                f"The registry {self.ref.registry} did not answer within "
                f"{self.limits.timeout_s:.0f}s."
            ) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ImageError(f"The registry {self.ref.registry} cannot be reached: {exc}.") from exc
        if auth and resp.status == 401 and not self.token:
            self._authenticate(resp.headers.get("WWW-Authenticate", ""))
            kw["headers"] = {**kw.get("headers", {}), **self._headers()}
            return self._request(method, url, auth=False, stream=stream, **kw)
        return resp

    def get_manifest(self, reference: str) -> tuple[dict[str, Any], str]:
        url = f"{self.base}/manifests/{reference}"
        resp = self._request("GET", url, headers=self._headers(MANIFEST_TYPES))
        if resp.status == 404:
            raise ImageError(f"The image {self.ref.text} does not exist in its registry.")
        if resp.status != 200:
            raise ImageError(f"The registry answered {resp.status} for {self.ref.text}.")
        if len(resp.data) > MAX_MANIFEST_BYTES:
            raise ImageError(f"The manifest of {self.ref.text} is larger than 4 MiB.")
        digest = resp.headers.get("Docker-Content-Digest", "")
        return json.loads(resp.data), digest

    def resolve(self) -> tuple[dict[str, Any], str]:
        """The linux/amd64 image manifest and the digest the image is cached under."""
        manifest, digest = self.get_manifest(self.ref.reference)
        if "manifests" in manifest:
            wanted = [
                m for m in manifest["manifests"]
                if (m.get("platform") or {}).get("os", "linux") == "linux"
                and (m.get("platform") or {}).get("architecture", "amd64") == "amd64"
            ]  # fmt: skip
            if not wanted:
                raise ImageError(f"{self.ref.text} has no linux/amd64 image.")
            digest = wanted[0]["digest"]
            manifest, _ = self.get_manifest(digest)
        return manifest, digest or self.ref.reference

    def layer_stream(self, digest: str) -> LayerStream:
        resp = self._request(
            "GET", f"{self.base}/blobs/{digest}", headers=self._headers(), stream=True
        )
        if resp.status != 200:
            raise ImageError(f"The registry answered {resp.status} for layer {digest[:19]}.")
        return LayerStream(resp, self)


class LayerStream:
    """A file-like stream of one layer, decompressed (gzip or none), counting bytes both sides.

    Each inflate step yields at most INFLATE_STEP bytes, so a layer bomb stops at the bound
    instead of expanding in memory first."""

    def __init__(self, resp: Any, client: RegistryClient) -> None:
        self.resp = resp
        self.client = client
        self.inflate = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib header, auto
        self.pending = b""
        self.plain: bool | None = None
        self.eof = False

    def _more(self) -> bytes:
        # at most one byte past the bound is ever inflated, however dense the layer
        room = self.client.limits.uncompressed_bytes - self.client.unpacked_total + 1
        step = max(1, min(INFLATE_STEP, room))
        if not self.plain and self.inflate.unconsumed_tail:
            return self.inflate.decompress(self.inflate.unconsumed_tail, step)
        chunk = self.resp.read(1 << 20)
        self.client._check_deadline()
        if not chunk:
            self.eof = True
            return b"" if self.plain else self.inflate.flush()
        self.client.fetched += len(chunk)
        if self.client.fetched > self.client.limits.compressed_bytes:
            raise BoundReachedError
        if self.plain is None:
            self.plain = chunk[:2] != b"\x1f\x8b"
        return chunk[:room] if self.plain else self.inflate.decompress(chunk, step)

    def read(self, size: int = -1) -> bytes:
        while (size < 0 or len(self.pending) < size) and not self.eof:
            data = self._more()
            if self.client.unpacked_total + len(data) > self.client.limits.uncompressed_bytes:
                raise BoundReachedError
            self.client.unpacked_total += len(data)
            self.pending += data
        if size < 0:
            size = len(self.pending)
        out, self.pending = self.pending[:size], self.pending[size:]
        return out


def scan_image(
    image: str,
    limits: Limits | None = None,
    credentials: dict[str, tuple[str, str]] | None = None,
    plain_http: frozenset[str] = frozenset(),
    cached: Any = None,
) -> ImageFacts:
    """Find GPU code in every ELF file of the image's layers; errors become `ImageFacts.error`.

    `cached(digest)` may return an earlier `ImageFacts` for the same digest (no layer is read)."""
    try:
        ref = parse_image(image)
        client = RegistryClient(ref, limits or Limits(), credentials or {}, plain_http)
        manifest, digest = client.resolve()
        if cached is not None and (hit := cached(digest)) is not None:
            return hit
        return _scan_layers(image, client, manifest, digest)
    except ImageError as exc:
        return ImageFacts(image=image, error=str(exc))


def _scan_layers(image: str, client: RegistryClient, manifest: dict, digest: str) -> ImageFacts:
    code = GpuCode()
    files: list[str] = []
    bound = False
    try:
        for layer in manifest.get("layers") or []:
            stream = client.layer_stream(str(layer.get("digest", "")))
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                for member in tar:
                    if not member.isreg() or member.size < 64 or member.size > MAX_ELF_BYTES:
                        continue
                    handle = tar.extractfile(member)
                    if handle is None or not is_elf(head := handle.read(4)):
                        continue
                    found = gpu_code_of(head + handle.read())
                    if found:
                        code.update(found)
                        files.append(member.name)
    except BoundReachedError:
        bound = True
    except tarfile.TarError as exc:
        raise ImageError(f"A layer of {image} is not a readable tar archive ({exc}).") from exc
    except zlib.error as exc:
        raise ImageError(f"A layer of {image} is not valid gzip ({exc}).") from exc
    return ImageFacts(
        image=image,
        digest=digest,
        bound_reached=bound,
        bytes_read=client.unpacked_total,
        gpu_files=tuple(files),
        sass=tuple(sorted(code.sass)),
        ptx=tuple(sorted(code.ptx)),
    )
