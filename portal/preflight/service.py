"""Running pre-flight for a project (web process): gather facts, run the pure checks.

Never raises for bad input or an unreachable dependency: a manifest that cannot be read is one
`will_fail` verdict; a cluster or registry that does not answer makes its checks say
"not checked" as warnings. Only a limit raises (`limits.BusyError`, "try again in N s").
Image scans run in the pre-flight worker (`tasks.scan_images`, queue PREFLIGHT_QUEUE); the web
process waits for their results on Redis until the call's deadline, holding no database
connection meanwhile.

The call's deadline (PREFLIGHT_CALL_DEADLINE_SECONDS) counts from the request's arrival at the
portal (`portal.core.arrival`), not from this view's start: under load a request can wait
seconds for a thread first. The wait ends ANSWER_MARGIN_S before it, which keeps the time
the checks, the page and the server's own queue need after the wait; the worker gets the same
instant and starts no image after it (nobody would read the result).
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
from portal.core.arrival import Arrival
from portal.preflight import checks, dbphase, gather, kube, limits, tasks
from portal.preflight.facts import Facts, ImageFacts, ProductFacts
from portal.preflight.manifest import ManifestError, parse_manifest
from portal.preflight.verdicts import Level, Verdict, overall, warning, will_fail
from portal.tenants.models import Project

ANSWER_MARGIN_S = 1.5


@dataclass(frozen=True)
class CallDeadline:
    """The instant a call's scans stop being waited for, on both clocks (worker: wall)."""

    monotonic: float
    wall: float

    @classmethod
    def after(cls, arrival: Arrival) -> CallDeadline:
        budget = settings.PREFLIGHT_CALL_DEADLINE_SECONDS - ANSWER_MARGIN_S
        return cls(arrival.monotonic + budget, arrival.wall + budget)

    def left(self) -> float:
        return self.monotonic - time.monotonic()


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
    dbphase.leave()  # the next call may start its reads


def _image_facts(found: dict[str, Any]) -> ImageFacts:
    return ImageFacts(**{k: tuple(v) if isinstance(v, list) else v for k, v in found.items()})


def _timed_out(image: str) -> ImageFacts:
    waited = settings.PREFLIGHT_CALL_DEADLINE_SECONDS
    return ImageFacts(
        image=image,
        error=f"Reading {image} did not finish within {waited:.0f} s, pre-flight's limit for "
        "one call (the registry is slow, or pre-flight is busy). Check again in a minute: a "
        "scan that had started goes on in the background and is kept.",
    )


def scan_in_worker(
    images: list[str], slot: limits.Slot, deadline: CallDeadline
) -> tuple[dict[str, ImageFacts], bool]:
    """Scan `images` in the pre-flight worker; wait for each result until `deadline`. An image
    not done by then says so; the worker finishes one it had started (and caches it) within its
    own per-image deadline, starts none after `deadline`, and then frees the slot. Returns the
    facts and whether the work was handed to the worker (then the worker frees the slot)."""
    if deadline.left() <= 0:  # the request waited its whole deadline before getting here
        return {image: _timed_out(image) for image in images}, False
    key = f"{settings.PREFLIGHT_KEY_PREFIX}:result:{uuid.uuid4().hex}"
    tasks.scan_images.apply_async(
        (key, images, slot.as_list(), deadline.wall), queue=settings.PREFLIGHT_QUEUE,
        expires=slot_hold_s(),  # the slot's own expiry: the task itself refuses late work
    )  # fmt: skip
    found: dict[str, ImageFacts] = {}
    redis = limits.client()
    while len(found) < len(images) and (left := deadline.left()) > 0:
        popped = redis.blpop([key], timeout=max(0.05, min(left, 5.0)))
        if popped is not None:
            facts = _image_facts(json.loads(popped[1]))
            found[facts.image] = facts
    return {image: found.get(image) or _timed_out(image) for image in images}, True


def slot_hold_s() -> float:
    """The longest a call's slot can be needed: the call, then one image the worker started."""
    return settings.PREFLIGHT_CALL_DEADLINE_SECONDS + settings.PREFLIGHT_IMAGE_DEADLINE_SECONDS


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
    user: Any,
    project: Project,
    text: str | bytes,
    scan_images: bool = True,
    arrival: Arrival | None = None,
) -> Report:
    """Every verdict for `text` applied in `project` by `user`, answered by the call's deadline
    counted from `arrival` (the request's; now if not given).

    Raises `limits.BusyError` when the user or organisation has too many calls running or ran
    too many this minute. The database is read first (products, the user's identity), then
    released: the cluster calls and the image scans (in the worker) hold no connection."""
    deadline = CallDeadline.after(arrival or Arrival.now())
    try:
        objects = parse_manifest(text)
    except ManifestError as exc:
        return Report(
            [will_fail("manifest", "manifest", str(exc), "Fix the YAML and check again.")]
        )
    slot = limits.acquire(user.pk, project.organization_id, slot_hold_s())
    dispatched = False
    try:
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
                found, dispatched = scan_in_worker(
                    images[: settings.PREFLIGHT_MAX_IMAGES], slot, deadline
                )
                scanned |= found
            facts = Facts(**{**facts.__dict__, "images": scanned})
        return Report(extra + checks.run_checks(facts))
    finally:
        if not dispatched:
            limits.release(slot)
