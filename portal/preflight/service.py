"""Running pre-flight for a project: gather facts (cluster, registry, cache), run the pure checks.

Never raises for bad input or an unreachable dependency: a manifest that cannot be read is one
`will_fail` verdict; a cluster or registry that does not answer makes its checks say
"not checked" as warnings. Image scans are cached by digest (`ImageScan`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from portal.access import cluster
from portal.catalog.models import Product
from portal.preflight import checks, gather, kube, registry
from portal.preflight.facts import Facts, ImageFacts, ProductFacts
from portal.preflight.manifest import ManifestError, parse_manifest
from portal.preflight.models import ImageScan
from portal.preflight.verdicts import Level, Verdict, overall, warning, will_fail
from portal.tenants.models import Project


@dataclass(frozen=True)
class Report:
    verdicts: list[Verdict]

    @property
    def level(self) -> Level:
        return overall(self.verdicts)

    def as_json(self) -> dict[str, Any]:
        return {"overall": str(self.level), "verdicts": [v.as_json() for v in self.verdicts]}


def product_facts() -> dict[str, ProductFacts]:
    return {
        p.device_class: ProductFacts(
            p.device_class,
            p.name,
            p.gpu_model.name,
            p.gpu_model.compute_capability,
            p.memory_mib,
            p.compute_percent,
        )
        for p in Product.objects.select_related("gpu_model")
    }


def _credentials() -> dict[str, tuple[str, str]]:
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
            import base64

            user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            out[host] = (user, password)
    return out


def _cached(digest: str) -> ImageFacts | None:
    scan = ImageScan.objects.filter(digest=digest).first()
    if scan is None:
        return None
    return ImageFacts(
        image="", digest=digest, bound_reached=scan.bound_reached, bytes_read=scan.bytes_read,
        gpu_files=tuple(scan.gpu_files), sass=tuple(scan.sass), ptx=tuple(scan.ptx),
    )  # fmt: skip


def scan_image(image: str) -> ImageFacts:
    """Scan (or recall by digest) one image; a finished scan is stored under its digest."""
    limits = registry.Limits(
        uncompressed_bytes=settings.PREFLIGHT_IMAGE_MAX_BYTES,
        compressed_bytes=settings.PREFLIGHT_IMAGE_MAX_BYTES,
        timeout_s=settings.PREFLIGHT_REGISTRY_TIMEOUT_SECONDS,
    )
    found = registry.scan_image(
        image, limits, _credentials(), frozenset(settings.PREFLIGHT_PLAIN_HTTP_REGISTRIES), _cached
    )
    if found.digest and not found.error and not found.image:
        return ImageFacts(**{**found.__dict__, "image": image})  # a cache hit
    if found.digest and not found.error and not found.bound_reached:
        ImageScan.objects.get_or_create(
            digest=found.digest,
            defaults={
                "sass": list(found.sass), "ptx": list(found.ptx),
                "gpu_files": list(found.gpu_files)[:200], "bytes_read": found.bytes_read,
            },
        )  # fmt: skip
    return found


def _cluster_facts(user: Any, project: Project, objects: list, products: dict) -> Facts:
    """Quota, capacity, volumes and a dry run of every object, as the user."""
    with cluster.session() as api:
        identity = kube.tenant_identity(user, project.namespace)
        return Facts(
            objects=objects,
            namespace=project.namespace,
            products=products,
            quota=gather.quota_facts(api, project.namespace),
            capacity=gather.capacity_facts(api, products),
            admission=tuple(gather.dry_run(api, project.namespace, o, identity) for o in objects),
            volume_claims=gather.volume_claims(api, project.namespace),
        )


def run_preflight(
    user: Any, project: Project, text: str | bytes, scan_images: bool = True
) -> Report:
    """Every verdict for `text` applied in `project` by `user`."""
    try:
        objects = parse_manifest(text)
    except ManifestError as exc:
        return Report(
            [will_fail("manifest", "manifest", str(exc), "Fix the YAML and check again.")]
        )
    products = product_facts()
    facts = Facts(objects=objects, namespace=project.namespace, products=products)
    extra: list[Verdict] = []
    try:
        facts = _cluster_facts(user, project, objects, products)
    except (kube.ClusterUnavailableError, cluster.ClusterUnavailableError) as exc:
        extra.append(
            warning(
                "cluster", project.namespace,
                f"Admission, quota and capacity were not checked: {exc}.",
                "Try again in a minute; if it persists, tell your platform team.",
            )
        )  # fmt: skip
    if scan_images and settings.PREFLIGHT_SCAN_IMAGES:
        images = {image: scan_image(image) for image, _ in checks.image_product_pairs(facts)}
        facts = Facts(**{**facts.__dict__, "images": images})
    return Report(extra + checks.run_checks(facts))
