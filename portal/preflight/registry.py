"""Talking to an image's OCI registry: the reference, the login, the manifest, the layer blobs.

Distribution API only; anonymous, basic, or bearer-token auth (the token realm named by
`WWW-Authenticate`, only on the registry's own host or one the operator allows), with
credentials from a docker config file the platform configures (PREFLIGHT_PULL_SECRET). Every
request goes through `outbound.Client` (HTTPS, public addresses, redirects re-checked, a
wall-clock deadline). Reading the layers for GPU code is `layers.py`.

Integrity: the digest an image is known by is the sha256 of the manifest bytes received; it must
equal the reference (when it is a digest) and the `Docker-Content-Digest` header (when sent). A
registry cannot file its scan under another image's digest.

Bounds: manifests MAX_MANIFEST_BYTES, token answers MAX_TOKEN_BYTES; the per-layer and per-image
bounds and the deadline are `Limits`, applied by `layers.LayerStream` and `outbound.Client`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from portal.preflight.outbound import Client, Policy

MANIFEST_TYPES = ", ".join([
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
])  # fmt: skip
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
MAX_TOKEN_BYTES = 64 * 1024
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class ImageError(Exception):
    """The image could not be read; the message is for the tenant."""


class ImageMissingError(ImageError):
    """The registry says the image does not exist: the node's pull will fail the same way."""


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
            raise ImageMissingError(f"The image {self.ref.text} does not exist in its registry.")
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

    def blob(self, digest: str) -> Any:
        """The response (body unread) for one layer blob named by its sha256 digest."""
        if not DIGEST.fullmatch(digest):
            raise ImageError(f"A layer of {self.ref.text} has no sha256 digest.")
        resp = self._request(f"{self.base}/blobs/{digest}")
        if resp.status != 200:
            raise ImageError(f"The registry answered {resp.status} for layer {digest[:19]}.")
        return resp
