"""Reading an image from its OCI registry, bounded, to find the CUDA code its files carry.

Distribution API only (manifest, then each layer blob streamed); anonymous, basic, or bearer-token
auth (the token realm named by `WWW-Authenticate`, only on the registry's own host or one the
operator allows), with credentials from a docker config file the platform configures
(PREFLIGHT_PULL_SECRET). Every request goes through `outbound.Client` (HTTPS, public addresses,
redirects re-checked, a wall-clock deadline). Nothing from the image is executed or written to
disk: layers are inflated as a stream and ELF members fed to `fatbin.FatbinStream` in chunks.

Integrity: the digest an image is known by is the sha256 of the manifest bytes received; it must
equal the reference (when it is a digest) and the `Docker-Content-Digest` header (when sent), and
every layer's bytes must hash to the digest its manifest names. A scan is cached only when all of
that held, so a registry cannot file its scan under another image's digest (#28).

Bounds: bytes per response (manifest, token), compressed and uncompressed bytes per layer and per
image; when a layer or image bound is reached the scan stops and says so (a layer bomb stops at
the uncompressed bound). The deadline covers the whole image, slow-drip answers included.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import re
import tarfile
import time
import zlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import urllib3

from portal.preflight.facts import ImageFacts
from portal.preflight.fatbin import FatbinStream, GpuCode, is_elf
from portal.preflight.outbound import Client, DeadlineError, OutboundError, Policy

MANIFEST_TYPES = ", ".join([
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
])  # fmt: skip
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
MAX_TOKEN_BYTES = 64 * 1024
MAX_ELF_BYTES = 512 * 1024 * 1024  # read of one ELF member (streamed: memory stays ~2 MiB)
INFLATE_STEP = 4 * 1024 * 1024
READ_STEP = 1 << 20
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


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
    layer_bytes: int = 2 * 1024**3  # compressed and uncompressed, each layer
    deadline_s: float = 120.0


@dataclass
class RegistryClient:
    """One image's reads, with its auth state and byte counters."""

    ref: ImageRef
    limits: Limits
    policy: Policy
    credentials: dict[str, tuple[str, str]] = field(default_factory=dict)
    fetched: int = 0
    unpacked_total: int = 0
    token: str = ""

    def __post_init__(self) -> None:
        self.started = time.monotonic()
        deadline = self.started + self.limits.deadline_s
        self.http = Client(self.policy, deadline, self.limits.deadline_s)
        host = self.ref.registry
        plain = host in self.policy.plain_http or host.split(":")[0] in self.policy.plain_http
        self.base = f"{'http' if plain else 'https'}://{host}/v2/{self.ref.repository}"
        self.host = urlsplit(self.base).hostname or ""

    def close(self) -> None:
        self.http.close()

    def _headers(self, accept: str = "") -> dict[str, str]:
        headers = {"Accept": accept} if accept else {}
        if self.token:
            headers["Authorization"] = self.token
        return headers

    def _realm(self, realm: str) -> str:
        """The token service URL, refused unless on the registry's host or allow-listed."""
        host = (urlsplit(realm).hostname or "").lower()
        if host != self.host and host not in self.policy.realm_hosts:
            raise ImageError(
                f"The registry {self.ref.registry} sends logins to another host ({host or '?'}); "
                "pre-flight asks only the registry itself, or token services your platform team "
                "allows."
            )
        return realm

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
            raise ImageError(
                f"The registry {self.ref.registry} asks for a login pre-flight does not know "
                f"({scheme[:20] or 'none'})."
            )
        query = {
            "service": fields.get("service", ""),
            "scope": f"repository:{self.ref.repository}:pull",
        }
        headers = {}
        if user_pass:
            headers["Authorization"] = (
                "Basic " + base64.b64encode(f"{user_pass[0]}:{user_pass[1]}".encode()).decode()
            )
        resp, _ = self.http.request("GET", self._realm(fields["realm"]), headers, query)
        raw = self.http.read(resp, MAX_TOKEN_BYTES, "The registry's token answer")
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        token = body.get("token") or body.get("access_token") if isinstance(body, dict) else ""
        if resp.status != 200 or not isinstance(token, str) or not token:
            raise ImageError(
                f"The registry {self.ref.registry} refused a pull token ({resp.status})."
            )
        self.token = f"Bearer {token}"

    def _request(self, url: str, accept: str = "", auth: bool = True) -> Any:
        resp, _ = self.http.request("GET", url, self._headers(accept), credentials_host=self.host)
        if auth and resp.status == 401 and not self.token:
            challenge = resp.headers.get("WWW-Authenticate", "")
            resp.release_conn()
            self._authenticate(challenge)
            return self._request(url, accept, auth=False)
        return resp

    def get_manifest(self, reference: str) -> tuple[dict[str, Any], str]:
        """The manifest and the sha256 of its bytes, which must match what was asked and said."""
        resp = self._request(f"{self.base}/manifests/{reference}", MANIFEST_TYPES)
        if resp.status == 404:
            raise ImageError(f"The image {self.ref.text} does not exist in its registry.")
        if resp.status in (401, 403):
            raise ImageError(
                f"The registry {self.ref.registry} refused to show {self.ref.text} "
                f"({resp.status}): the image is private, or the platform's login lacks access."
            )
        if resp.status != 200:
            raise ImageError(f"The registry answered {resp.status} for {self.ref.text}.")
        raw = self.http.read(resp, MAX_MANIFEST_BYTES, f"The manifest of {self.ref.text}")
        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        said = resp.headers.get("Docker-Content-Digest", "")
        if (DIGEST.fullmatch(reference) and reference != digest) or (said and said != digest):
            raise ImageError(
                f"The registry {self.ref.registry} sent a manifest for {self.ref.text} whose "
                "bytes do not match the digest asked for or announced; pre-flight does not "
                "trust it. Check the image reference, or ask the registry's owner."
            )
        try:
            manifest = json.loads(raw)
        except ValueError:
            manifest = None
        if not isinstance(manifest, dict):
            raise ImageError(
                f"The registry {self.ref.registry} answered for {self.ref.text} with something "
                "that is not an image manifest."
            )
        return manifest, digest

    def resolve(self) -> tuple[dict[str, Any], str]:
        """The linux/amd64 image manifest and the digest of its bytes (what a scan is cached by)."""
        manifest, digest = self.get_manifest(self.ref.reference)
        if "manifests" in manifest:
            wanted = [
                m for m in manifest["manifests"] or []
                if isinstance(m, dict)
                and (m.get("platform") or {}).get("os", "linux") == "linux"
                and (m.get("platform") or {}).get("architecture", "amd64") == "amd64"
            ]  # fmt: skip
            if not wanted or not DIGEST.fullmatch(str(wanted[0].get("digest"))):
                raise ImageError(f"{self.ref.text} has no linux/amd64 image.")
            manifest, digest = self.get_manifest(str(wanted[0]["digest"]))
        return manifest, digest

    def layer_stream(self, digest: str) -> LayerStream:
        if not DIGEST.fullmatch(digest):
            raise ImageError(f"A layer of {self.ref.text} has no sha256 digest.")
        resp = self._request(f"{self.base}/blobs/{digest}")
        if resp.status != 200:
            raise ImageError(f"The registry answered {resp.status} for layer {digest[:19]}.")
        return LayerStream(resp, self, digest)


class LayerStream:
    """A file-like stream of one layer, decompressed (gzip or none), counting bytes both sides
    and hashing what it fetched (`verify()` compares it with the digest the manifest names).

    Each inflate step yields at most INFLATE_STEP bytes, so a layer bomb stops at the bound
    instead of expanding in memory first."""

    def __init__(self, resp: Any, client: RegistryClient, digest: str) -> None:
        self.resp = resp
        self.client = client
        self.digest = digest
        self.sha = hashlib.sha256()
        self.inflate = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib header, auto
        self.pending = b""
        self.plain: bool | None = None
        self.eof = False
        self.fetched = 0
        self.unpacked = 0

    def _room(self) -> int:
        limits, client = self.client.limits, self.client
        return min(
            limits.uncompressed_bytes - client.unpacked_total, limits.layer_bytes - self.unpacked
        )

    def _more(self) -> bytes:
        # at most one byte past the bound is ever inflated, however dense the layer
        step = max(1, min(INFLATE_STEP, self._room() + 1))
        if not self.plain and self.inflate.unconsumed_tail:
            return self.inflate.decompress(self.inflate.unconsumed_tail, step)
        self.client.http.check_deadline()
        try:
            chunk = self.resp.read(READ_STEP)
        except (OSError, urllib3.exceptions.HTTPError, http.client.HTTPException) as exc:
            self.client.http.check_deadline()
            raise OutboundError("the registry cut a layer off") from exc
        self.client.http.check_deadline()
        if not chunk:
            self.eof = True
            return b"" if self.plain else self.inflate.flush()
        self.sha.update(chunk)
        self.fetched += len(chunk)
        self.client.fetched += len(chunk)
        if (
            self.client.fetched > self.client.limits.compressed_bytes
            or self.fetched > self.client.limits.layer_bytes
        ):
            raise BoundReachedError
        if self.plain is None:
            self.plain = chunk[:2] != b"\x1f\x8b"
        return chunk[:step] if self.plain else self.inflate.decompress(chunk, step)

    def read(self, size: int = -1) -> bytes:
        while (size < 0 or len(self.pending) < size) and not self.eof:
            data = self._more()
            if len(data) > self._room():
                raise BoundReachedError
            self.client.unpacked_total += len(data)
            self.unpacked += len(data)
            self.pending += data
        if size < 0:
            size = len(self.pending)
        out, self.pending = self.pending[:size], self.pending[size:]
        return out

    def verify(self) -> None:
        """After the tar's end: read the rest, then the bytes must hash to the layer's digest."""
        while not self.eof:
            self.pending = b""
            self.read(READ_STEP)
        if "sha256:" + self.sha.hexdigest() != self.digest:
            raise ImageError(
                f"The registry sent a layer whose bytes do not match its digest "
                f"{self.digest[:19]}…; pre-flight does not trust the image."
            )


def scan_image(
    image: str,
    limits: Limits | None = None,
    credentials: dict[str, tuple[str, str]] | None = None,
    policy: Policy | None = None,
    cached: Any = None,
) -> ImageFacts:
    """Find GPU code in every ELF file of the image's layers; errors become `ImageFacts.error`.

    `cached(digest)` may return an earlier `ImageFacts` for the sha256 of the manifest bytes
    received (no layer is read)."""
    client = None
    try:
        ref = parse_image(image)
        client = RegistryClient(ref, limits or Limits(), policy or Policy(), credentials or {})
        manifest, digest = client.resolve()
        if cached is not None and (hit := cached(digest)) is not None:
            return hit
        return _scan_layers(image, client, manifest, digest)
    except ImageError as exc:
        return ImageFacts(image=image, error=str(exc))
    except DeadlineError:
        deadline = (limits or Limits()).deadline_s
        host = image.split("/", maxsplit=1)[0]
        return ImageFacts(
            image=image,
            error=f"The registry {host} took longer than {deadline:.0f} s (pre-flight's limit "
            "for one image). Try again later, or check a smaller image.",
        )
    except OutboundError as exc:
        return ImageFacts(image=image, error=f"The registry for {image} could not be read: {exc}.")
    finally:
        if client is not None:
            client.close()


def _scan_member(handle: Any) -> GpuCode | None:
    """GPU code of one tar member if it is an ELF file, read in chunks up to MAX_ELF_BYTES."""
    head = handle.read(64)
    if not is_elf(head):
        return None
    stream = FatbinStream()
    stream.feed(head)
    read = len(head)
    while read < MAX_ELF_BYTES and (chunk := handle.read(min(READ_STEP, MAX_ELF_BYTES - read))):
        stream.feed(chunk)
        read += len(chunk)
    return stream.result()


def _scan_layers(image: str, client: RegistryClient, manifest: dict, digest: str) -> ImageFacts:
    code = GpuCode()
    files: list[str] = []
    bound = False
    try:
        for layer in manifest.get("layers") or []:
            stream = client.layer_stream(str((layer or {}).get("digest", "")))
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                for member in tar:
                    if not member.isreg() or member.size < 64:
                        continue
                    handle = tar.extractfile(member)
                    found = _scan_member(handle) if handle is not None else None
                    if found:
                        code.update(found)
                        files.append(member.name)
            stream.verify()
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
