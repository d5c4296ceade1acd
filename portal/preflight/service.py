"""Running pre-flight for a project (web process): gather facts, run the pure checks.

Never raises for bad input or an unreachable dependency: a manifest that cannot be read is one
`will_fail` verdict; a cluster or registry that does not answer makes its checks say
"not checked" as warnings. Only a limit raises (`limits.BusyError`, "try again in N s").
Image scans run in the pre-flight worker (`tasks.scan_images`, queue PREFLIGHT_QUEUE); the web
process waits for their results on Redis until the call's deadline, holding no database
connection meanwhile.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connections

from portal.access import cluster
from portal.agents.selectors import measured_context_bytes
from portal.catalog.models import Product
from portal.preflight import checks, gather, kube, limits, tasks
from portal.preflight.facts import Facts, ImageFacts, ProductFacts
from portal.preflight.manifest import ManifestError, parse_manifest
from portal.preflight.verdicts import Level, Verdict, overall, warning, will_fail
from portal.tenants.models import Project

ANSWER_MARGIN_S = 0.5


@dataclass(frozen=True)
class Report:
    verdicts: list[Verdict]

    @property
    def level(self) -> Level:
        return overall(self.verdicts)

    def as_json(self) -> dict[str, Any]:
        return {"overall": str(self.level), "verdicts": [v.as_json() for v in self.verdicts]}


def product_facts() -> dict[str, ProductFacts]:
    measured = measured_context_bytes()
    return {
        p.device_class: ProductFacts(
            p.device_class,
            p.name,
            p.gpu_model.name,
            p.gpu_model.compute_capability,
            p.memory_mib,
            p.compute_percent,
            measured[p.gpu_model.name] // 2**20 if p.gpu_model.name in measured else None,
        )
        for p in Product.objects.select_related("gpu_model")
    }


def _release_db() -> None:
    """Hand this request's connections back to the pool: what follows waits on the network
    (API server, registry via the worker), and the pool is shared by every tenant's pages."""
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:  # a caller's transaction (a test's) keeps its connection
            conn.close()


def _image_facts(found: dict[str, Any]) -> ImageFacts:
    return ImageFacts(**{k: tuple(v) if isinstance(v, list) else v for k, v in found.items()})


def scan_in_worker(images: list[str], slot: limits.Slot, deadline: float) -> dict[str, ImageFacts]:
    """Scan `images` in the pre-flight worker; wait for each result until `deadline` (a
    time.monotonic() value). An image not done by then says so; the worker finishes it (and
    caches it) within its own per-image deadline and then frees the slot."""
    key = f"{settings.PREFLIGHT_KEY_PREFIX}:result:{uuid.uuid4().hex}"
    tasks.scan_images.apply_async(
        (key, images, slot.as_list()), queue=settings.PREFLIGHT_QUEUE,
        expires=settings.PREFLIGHT_CALL_DEADLINE_SECONDS,
    )  # fmt: skip
    found: dict[str, ImageFacts] = {}
    redis = limits.client()
    while len(found) < len(images) and (left := deadline - time.monotonic()) > 0:
        popped = redis.blpop([key], timeout=max(0.05, min(left, 5.0)))
        if popped is not None:
            facts = _image_facts(json.loads(popped[1]))
            found[facts.image] = facts
    waited = settings.PREFLIGHT_CALL_DEADLINE_SECONDS
    for image in images:
        if image not in found:
            found[image] = ImageFacts(
                image=image,
                error=f"Reading {image} did not finish within {waited:.0f} s, pre-flight's "
                "limit for one call. It goes on in the background (a finished scan is kept): "
                "check again in a minute.",
            )
    return found


def _cluster_facts(
    identity: kube.Identity, project: Project, objects: list, products: dict
) -> Facts:
    """Quota, capacity, volumes and a dry run of every object, as the user."""
    with cluster.session() as api:
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
    """Every verdict for `text` applied in `project` by `user`.

    Raises `limits.BusyError` when the user or organisation has too many calls running or ran
    too many this minute. The database is read first (products, the user's identity), then
    released: the cluster calls and the image scans (in the worker) hold no connection."""
    started = time.monotonic()
    try:
        objects = parse_manifest(text)
    except ManifestError as exc:
        return Report(
            [will_fail("manifest", "manifest", str(exc), "Fix the YAML and check again.")]
        )
    hold = settings.PREFLIGHT_CALL_DEADLINE_SECONDS + (
        settings.PREFLIGHT_MAX_IMAGES * settings.PREFLIGHT_IMAGE_DEADLINE_SECONDS
    )
    slot = limits.acquire(user.pk, project.organization_id, hold)
    dispatched = False
    try:
        # the whole call's answer time; the last moment is kept for the checks and the page
        deadline = started + settings.PREFLIGHT_CALL_DEADLINE_SECONDS - ANSWER_MARGIN_S
        products = product_facts()
        identity = kube.tenant_identity(user, project.namespace)
        _release_db()
        facts = Facts(objects=objects, namespace=project.namespace, products=products)
        extra: list[Verdict] = []
        try:
            facts = _cluster_facts(identity, project, objects, products)
        except (kube.ClusterUnavailableError, cluster.ClusterUnavailableError) as exc:
            extra.append(
                warning(
                    "cluster", project.namespace,
                    f"Admission, quota and capacity were not checked: {exc}.",
                    "Try again in a minute; if it persists, tell your platform team.",
                )
            )  # fmt: skip
        if scan_images and settings.PREFLIGHT_SCAN_IMAGES:
            images = list(dict.fromkeys(image for image, _ in checks.image_product_pairs(facts)))
            scanned: dict[str, ImageFacts] = {}
            for image in images[settings.PREFLIGHT_MAX_IMAGES :]:
                scanned[image] = ImageFacts(
                    image=image,
                    error=f"The manifest names {len(images)} images; pre-flight reads at most "
                    f"{settings.PREFLIGHT_MAX_IMAGES} per check. Check the rest separately.",
                )
            if images:
                dispatched = True
                scanned |= scan_in_worker(images[: settings.PREFLIGHT_MAX_IMAGES], slot, deadline)
            facts = Facts(**{**facts.__dict__, "images": scanned})
        return Report(extra + checks.run_checks(facts))
    finally:
        if not dispatched:
            limits.release(slot)
