"""The watcher's one entry point into the live pages: `record_cluster_view`.

Per project namespace the watcher passes what the cluster says now (every pod's facts, the
workloads whose pods could not be created, the ResourceQuota status). This module classifies
each pod (`tranche.pod_reasons`) with the project's facts from the database (entitlements,
product names, suspension), stores the rows the live page reads (`PodState`, only the pods that
exist now), stores CPU/RAM used from the quota status (the quota page's "Used" and headroom),
and tells the live pages which rows changed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Literal, TypedDict

from django.db import transaction

from portal.catalog.models import Product
from portal.core import figures
from portal.core.groups import project_group
from portal.orders.models import Subscription
from portal.status.models import (
    EVENT_MESSAGE_CHARS,
    EVENTS_SHOWN,
    MAX_ROWS_PER_PROJECT,
    PodState,
)
from portal.status.warnings import shorten
from portal.tenants.models import Project
from portal.tenants.services import record_project_resources
from tranche.pod_reasons import (
    DEVICE_QUOTA_SUFFIX,
    RUNNING,
    PodFacts,
    ProjectFacts,
    classify,
    classify_refusal,
    mebibytes,
    millicores,
)

log = logging.getLogger("portal.status")


class PodClusterEvent(TypedDict):
    """A row of the live table changed because the cluster's view of the pod changed."""

    type: Literal["pod.cluster"]
    namespace: str
    pod: str


def project_facts(project: Project, pods: Iterable[PodFacts], quota: dict | None) -> ProjectFacts:
    """The project's side of a classification: products, entitlements, holders, suspension."""
    org = project.organization
    products = dict(Product.objects.values_list("device_class", "name"))
    entitled = dict(
        Subscription.objects.filter(project=project).values_list(
            "product__device_class", "quantity"
        )
    )
    if quota:  # the cluster's own figure wins: it is what the API server enforces now
        for key, value in quota.get("hard", {}).items():
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


def record_quota_status(project_id: int, quota: dict | None) -> bool:
    """CPU/RAM used from the ResourceQuota's status (a new project's status says 0)."""
    used = (quota or {}).get("used")
    if used is None:
        return False
    return record_project_resources(
        project_id=project_id,
        cpu_used_millicores=millicores(used.get("requests.cpu", "0")),
        memory_used_mib=mebibytes(used.get("requests.memory", "0")),
    )


def _publish(project_id: int, keys: Iterable[tuple[str, str]]) -> None:
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        return
    for namespace, name in keys:
        event = PodClusterEvent(type="pod.cluster", namespace=namespace, pod=name)
        async_to_sync(layer.group_send)(project_group(project_id), event)


def record_cluster_view(
    *,
    project_id: int,
    namespace: str,
    pods: list[PodFacts],
    refusals: list[tuple[str, str, str]],
    quota: dict | None,
) -> dict[str, str]:
    """Store what the cluster says about one project namespace now.

    `refusals` are (kind, name, message) of workloads whose pods could not be created. Rows of
    pods no longer listed are deleted. Writes only what changed; live pages hear of each change.
    Returns, per DeviceClass with waiting pods, one line per waiting pod with its words (the
    quota page's "Pending" reasons, so they read the same as the live page; `pending_text`).
    """
    project = Project.objects.select_related("organization").filter(pk=project_id).first()
    if project is None:
        return {}
    record_quota_status(project_id, quota)
    facts = project_facts(project, pods, quota)
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
    for kind, name, message in refusals:
        wanted[(kind, name)] = {"phase": "NotCreated", "verdict": classify_refusal(message, facts)}
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
                "words": v.words[:600],
                "next_step": v.next_step[:300],
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


PENDING_REASON_CHARS = 500  # ProjectUsage.pending_reason


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
