"""Image scans as the pre-flight worker runs them: the operator's policy, logins and the cache.

Runs in the Celery worker (`tasks.scan_images`), never in the web process. A database
connection is held only around the two short cache queries, never across the registry's
network I/O (a silent registry once held every connection of the portal). Scans are cached
by the sha256 of the manifest bytes received (checked by `registry.py` against the reference and
the header), and only when every layer matched its digest (`layers.py`) and no bound was reached.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from django.conf import settings
from django.db import connections

from portal.preflight import layers, registry
from portal.preflight.facts import ImageFacts
from portal.preflight.models import ImageScan
from portal.preflight.outbound import Policy


def policy() -> Policy:
    """The outbound rules from settings (docs/preflight.md, "Outbound requests")."""
    return Policy(
        plain_http=frozenset(h.lower() for h in settings.PREFLIGHT_PLAIN_HTTP_REGISTRIES),
        allowed_hosts=frozenset(h.lower() for h in settings.PREFLIGHT_ALLOWED_REGISTRIES),
        realm_hosts=frozenset(h.lower() for h in settings.PREFLIGHT_TOKEN_REALMS),
        blocked_networks=Policy.networks(settings.PREFLIGHT_BLOCKED_NETWORKS),
        timeout_s=settings.PREFLIGHT_REGISTRY_TIMEOUT_SECONDS,
    )


def limits(within_s: float | None = None) -> registry.Limits:
    """The read bounds; the image's deadline, or `within_s` when that is sooner."""
    deadline = settings.PREFLIGHT_IMAGE_DEADLINE_SECONDS
    return registry.Limits(
        uncompressed_bytes=settings.PREFLIGHT_IMAGE_MAX_BYTES,
        compressed_bytes=settings.PREFLIGHT_IMAGE_MAX_BYTES,
        layer_bytes=settings.PREFLIGHT_LAYER_MAX_BYTES,
        deadline_s=deadline if within_s is None else min(deadline, within_s),
    )


def credentials() -> dict[str, tuple[str, str]]:
    """Registry logins from the platform's docker config.json (a pull secret's content)."""
    path = settings.PREFLIGHT_PULL_SECRET
    if not path:
        return {}
    try:
        auths = json.loads(Path(path).read_text()).get("auths", {})
    except (OSError, ValueError):
        return {}
    out = {}
    for host, entry in auths.items():
        if entry.get("username"):
            out[host] = (entry["username"], entry.get("password", ""))
        elif entry.get("auth"):
            user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            out[host] = (user, password)
    return out


def _release_db() -> None:
    """Hand the connection back to the pool before the next network wait."""
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:  # a caller's transaction (a test's) keeps its connection
            conn.close()


def _cached(digest: str) -> ImageFacts | None:
    try:
        scan = ImageScan.objects.filter(digest=digest).first()
    finally:
        _release_db()
    if scan is None:
        return None
    return ImageFacts(
        image="", digest=digest, bound_reached=scan.bound_reached, bytes_read=scan.bytes_read,
        gpu_files=tuple(scan.gpu_files), sass=tuple(scan.sass), ptx=tuple(scan.ptx),
    )  # fmt: skip


def scan_image(image: str, within_s: float | None = None) -> ImageFacts:
    """Scan (or recall by the sha256 of its manifest) one image; a finished scan is stored.
    `within_s`: end sooner than the image's own deadline (the task's time limit)."""
    _release_db()
    found = layers.scan_image(image, limits(within_s), credentials(), policy(), _cached)
    if found.digest and not found.error and not found.image:
        return ImageFacts(**{**found.__dict__, "image": image})  # a cache hit
    if found.digest and not found.error and not found.bound_reached:
        try:
            ImageScan.objects.get_or_create(
                digest=found.digest,
                defaults={
                    "sass": list(found.sass), "ptx": list(found.ptx),
                    "gpu_files": list(found.gpu_files)[:200], "bytes_read": found.bytes_read,
                },
            )  # fmt: skip
        finally:
            _release_db()
    return found
