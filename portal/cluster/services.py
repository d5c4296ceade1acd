"""The one way observations come in: `record_namespace(view)`, what the cluster says about one
project namespace now (a `tranche.observed.NamespaceView` the controller built).

It classifies each pod (`tranche.pod_reasons`) with the project's facts (products, the GPU
entitlements the namespace's ResourceQuota enforces, suspension) and stores, each only where it
changed: the rows the live page reads (`PodState`, only pods that exist now), the slices
allocated and pending per product with the same words as the live page (`ProjectUsage`, the
quota page), the CPU/RAM used from the quota status (`QuotaUse`), and every pod's binding
(`bindings`, which the agents' ingest reads); then it tells the live pages which rows changed.
Idempotent: recording the same view again writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Literal, TypedDict

from django.db import transaction
from django.utils import timezone

from portal.catalog.models import Product
from portal.cluster import bindings
from portal.cluster.models import (
    EVENT_MESSAGE_CHARS,
    EVENTS_SHOWN,
    MAX_ROWS_PER_PROJECT,
    PENDING_REASON_CHARS,
    PodState,
    ProjectUsage,
    QuotaUse,
)
from portal.core import figures
from portal.core.groups import project_group
from portal.tenants.models import Project
from tranche.observed import ClassUsage, NamespaceView, QuotaStatus
from tranche.pod_reasons import (
    DEVICE_QUOTA_SUFFIX,
    NEXT_STEP_CHARS,
    RUNNING,
    WORDS_CHARS,
    PodFacts,
    ProjectFacts,
    classify,
    classify_refusal,
    mebibytes,
    millicores,
    shorten,
)

log = logging.getLogger("portal.cluster")


class PodClusterEvent(TypedDict):
    """A row of the live table changed because the cluster's view of the pod changed."""

    type: Literal["pod.cluster"]
    namespace: str
    pod: str


def project_facts(
    project: Project, pods: Iterable[PodFacts], quota: QuotaStatus | None, products: dict[str, str]
) -> ProjectFacts:
    """The project's side of a classification: products, entitlements, holders, suspension.

    The entitlements are the quota's own figures: what the API server enforces now (the
    controller renders a device quota for every product, 0 where nothing is bought)."""
    org = project.organization
    entitled: dict[str, int] = {}
    for key, value in (quota.hard if quota else {}).items():
        if key.endswith(DEVICE_QUOTA_SUFFIX):
            entitled[key[: -len(DEVICE_QUOTA_SUFFIX)]] = int(float(value))
    holders: dict[str, list[str]] = {}  # a pod holds quota once its claim exists
    for pod in pods:
        if pod.phase in ("Pending", "Running"):
            for cls in set(pod.gpu_classes) - set(pod.unclaimed_classes):
                holders.setdefault(cls, []).append(pod.name)
    return ProjectFacts(
        suspended=org.is_suspended,
        suspension_reason=org.suspension_reason,
        products=products,
        gpu_quota=entitled,
        gpu_holders={cls: tuple(names) for cls, names in holders.items()},
    )


def record_quota_use(project_id: int, quota: QuotaStatus | None) -> bool:
    """CPU/RAM used from the ResourceQuota's status (a new project's status says 0); True if
    a figure changed."""
    if quota is None or quota.used is None:
        return False
    values = {
        "cpu_used_millicores": millicores(quota.used.get("requests.cpu", "0")),
        "memory_used_mib": mebibytes(quota.used.get("requests.memory", "0")),
    }
    changed = (
        QuotaUse.objects.filter(project_id=project_id)
        .exclude(**values)
        .update(updated_at=timezone.now(), **values)
    )
    if changed:
        return True
    _row, created = QuotaUse.objects.get_or_create(project_id=project_id, defaults=values)
    return created


def record_slice_usage(
    project_id: int, usage: dict[str, ClassUsage], words: dict[str, str], products: dict[str, int]
) -> int:
    """Store allocated/pending slices per product (classes of no product are ignored), with
    `words` (per class, the live page's words for its waiting pods) as the pending reason; a
    product stored before and absent now goes to 0. Writes only rows that change."""
    stored = {u.product_id: u for u in ProjectUsage.objects.filter(project_id=project_id)}
    written = 0
    for cls, product_id in products.items():
        use = usage.get(cls)
        if use is None and product_id not in stored:
            continue
        use = use or ClassUsage()
        reason = words.get(cls, use.pending_reason) if use.pending else ""
        values = {
            "allocated": use.allocated,
            "pending": use.pending,
            "pending_reason": reason[:PENDING_REASON_CHARS],
        }
        old = stored.get(product_id)
        if old is not None and all(getattr(old, k) == v for k, v in values.items()):
            continue
        ProjectUsage.objects.update_or_create(
            project_id=project_id, product_id=product_id, defaults=values
        )
        written += 1
    return written


def _publish(project_id: int, keys: Iterable[tuple[str, str]]) -> None:
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        return
    group = project_group(project_id)
    events = [PodClusterEvent(type="pod.cluster", namespace=ns, pod=name) for ns, name in keys]

    async def send_all() -> None:
        for event in events:
            await layer.group_send(group, event)

    # one trip into the event loop for the flush's rows, not one each: a sync-to-async call
    # costs far more than the send it wraps
    async_to_sync(send_all)()


def record_namespace(view: NamespaceView) -> bool:
    """Store what the cluster says about one namespace now; False if no project has it.

    Rows of pods no longer listed are deleted. Writes only what changed; live pages hear of each
    change once it is committed."""
    project = Project.objects.select_related("organization").filter(namespace=view.namespace)
    project = project.first()
    if project is None:
        return False
    catalogue = Product.objects.values_list("device_class", "pk", "name")
    products = {cls: pk for cls, pk, _name in catalogue}
    names = {cls: name for cls, _pk, name in catalogue}
    used = record_quota_use(project.pk, view.quota)
    words = record_pods(project, view, names)  # says `figures.changed` itself
    if record_slice_usage(project.pk, dict(view.usage), words, products) or used:
        figures.changed(project.pk)  # the quota page's figures (portal.core.figures)
    bindings.write_pod_states(project.pk, view.pods)
    return True


def record_pods(project: Project, view: NamespaceView, products: dict[str, str]) -> dict[str, str]:
    """Classify and store the namespace's pods and refusals (`PodState`).

    Returns, per DeviceClass with waiting pods, one line per waiting pod with its words (the
    quota page's "Pending" reasons, so they read the same as the live page; `pending_text`)."""
    project_id, namespace = project.pk, view.namespace
    pods: list[PodFacts] = [p.facts for p in view.pods]
    facts = project_facts(project, pods, view.quota, products)
    wanted: dict[tuple[str, str], dict] = {}
    waiting: dict[str, list[str]] = {}
    for pod in sorted(pods, key=lambda p: p.name):
        verdict = classify(pod, facts)
        wanted[("Pod", pod.name)] = {
            "phase": pod.phase,
            "verdict": verdict,
            # a pod that runs as it should carries no warnings (a rollout's transient quota
            # refusal is over once it runs); any other verdict keeps what led to it
            "events": [] if verdict.reason == RUNNING else timeline_of(pod),
        }
        if pod.phase == "Pending":
            for cls in pod.gpu_classes:
                waiting.setdefault(cls, []).append(f"{pod.name}: {verdict.words}")
    pending_words = {cls: pending_text(lines) for cls, lines in waiting.items()}
    for refusal in view.refusals:
        wanted[(refusal.kind, refusal.name)] = {
            "phase": "NotCreated",
            "verdict": classify_refusal(refusal.message, facts),
        }
    if len(wanted) > MAX_ROWS_PER_PROJECT:
        log.warning(
            "%s: %d pods, keeping the first %d", namespace, len(wanted), MAX_ROWS_PER_PROJECT
        )
        wanted = dict(sorted(wanted.items())[:MAX_ROWS_PER_PROJECT])
    changed: list[tuple[str, str]] = []
    with transaction.atomic():
        stored = {
            (s.kind, s.name): s
            for s in PodState.objects.select_for_update().filter(namespace=namespace)
        }
        for key, want in wanted.items():
            v = want["verdict"]
            values = {
                "project_id": project_id,
                "phase": want["phase"][:16],
                "reason": v.reason[:32],
                "words": shorten(v.words, WORDS_CHARS),
                "next_step": shorten(v.next_step, NEXT_STEP_CHARS),
                "events": want.get("events", []),
            }
            old = stored.get(key)
            if old and all(getattr(old, k) == val for k, val in values.items()):
                continue
            PodState.objects.update_or_create(
                namespace=namespace, kind=key[0], name=key[1], defaults=values
            )
            changed.append(key)
        gone = [key for key in stored if key not in wanted]
        for kind, name in gone:
            PodState.objects.filter(namespace=namespace, kind=kind, name=name).delete()
        changed += gone
    if changed:
        figures.changed(project_id)
        transaction.on_commit(
            lambda: _publish(project_id, [(namespace, row_name(k, n)) for k, n in changed])
        )
    return pending_words


def pending_text(lines: list[str], limit: int = PENDING_REASON_CHARS) -> str:
    """Each waiting pod's line, as many as fit in `limit` characters; the rest counted, with
    where to read them."""
    kept: list[str] = []
    for i, line in enumerate(lines):
        rest = len(lines) - i - 1
        more = f"… and {rest} more waiting: see the live status page." if rest else ""
        budget = limit - sum(len(k) + 1 for k in kept) - (len(more) + 1 if more else 0)
        if budget < 40:  # not even a pod name and a few words fit: count the rest instead
            return "\n".join(
                [*kept, f"… and {len(lines) - i} more waiting: see the live status page."]
            )
        kept.append(shorten(line, budget))
    return "\n".join(kept)


def timeline_of(pod: PodFacts) -> list[list[str]]:
    """The pod's stored timeline: its last EVENTS_SHOWN Warning events, each field bounded (the
    message cut at a word, marked "…")."""
    return [
        [when[:32], reason[:64], shorten(message, EVENT_MESSAGE_CHARS)]
        for when, reason, message in pod.timeline[-EVENTS_SHOWN:]
    ]


def row_name(kind: str, name: str) -> str:
    """The live table's name of a row: a pod's own name, or `ReplicaSet/web-5f` for a workload."""
    return name if kind == "Pod" else f"{kind}/{name}"
