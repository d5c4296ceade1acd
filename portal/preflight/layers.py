"""Reading an image's layers, bounded, for the GPU code its ELF files carry (`scan_image`).

Nothing from the image is executed or written to disk: each layer blob is inflated as a stream
(`LayerStream`), its tar walked member by member, and ELF members fed to `fatbin.FatbinStream`
in chunks. Every layer's bytes must hash to the digest its manifest names (`verify()`); a scan
is cacheable only when all of that held and no bound was reached.

Bounds: compressed and uncompressed bytes per layer and per image (`registry.Limits`); when one
is reached the scan stops and says so (a layer bomb stops at the uncompressed bound). The
deadline covers the whole image, slow-drip answers included (`outbound.Client`).
"""

from __future__ import annotations

import hashlib
import http.client
import tarfile
import zlib
from typing import Any

import urllib3

from portal.preflight.facts import ImageFacts
from portal.preflight.fatbin import FatbinStream, GpuCode, is_elf
from portal.preflight.outbound import DeadlineError, OutboundError, Policy
from portal.preflight.registry import (
    ImageError,
    ImageMissingError,
    Limits,
    RegistryClient,
    parse_image,
)

MAX_ELF_BYTES = 512 * 1024 * 1024  # read of one ELF member (streamed: memory stays ~2 MiB)
INFLATE_STEP = 4 * 1024 * 1024
READ_STEP = 1 << 20


class BoundReachedError(Exception):
    """The per-image byte bound was reached."""


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
    except ImageMissingError as exc:
        return ImageFacts(image=image, error=str(exc), missing=True)
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
            blob_digest = str((layer or {}).get("digest", ""))
            stream = LayerStream(client.blob(blob_digest), client, blob_digest)
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
