"""Every write of the agents app: issuing/revoking node tokens and recording agent status.

`record_status` is one transaction that applies each pod entry of a frame on its own: a pod
of another project, one the cluster did not bind to this node (`agents.bindings`, written by
the watcher) or another node's stored pod is refused alone and named in the answer, and the
frame's other entries, its removals included, are applied (a removal travelling with
a not-yet-bound pod was lost with it). Re-recording the same frame is idempotent (rows are
upserted per pod).
"""

from __future__ import annotations

import functools
import hmac
import json
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime

import redis
from django.db import connection, transaction
from django.utils import timezone

from portal.agents import gpu_health, health_admission, history
from portal.agents.events import NodeSeenEvent, PodRemovedEvent, PodStatusEvent, ProjectEvent
from portal.agents.models import NodeToken, PodSliceStatus
from portal.agents.rows import LiveRow, pod_row
from portal.audit.services import record_audit
from portal.cluster.bindings import pod_bindings
from portal.core.tokens import hash_token
from portal.tenants.models import Project
from tranche.agent_protocol import (
    PodReport,
    RefusedEntry,
    RemovedPod,
    StatusMessage,
    columns_of,
)

TOKEN_BYTES = 32
FINDINGS_KEPT = 50  # per node: the support console's alerts of the last day fit
# PodSliceStatus column of each reported pod field; namespace and pod name identify the row.
POD_COLUMNS = {f: c for f, c in columns_of(PodReport).items() if f not in ("namespace", "pod")}
# What an optional field an older agent leaves out is stored as: its column's default.
POD_DEFAULTS = {f: PodSliceStatus._meta.get_field(c).get_default() for f, c in POD_COLUMNS.items()}
# The fields one status upsert writes, in the order of its arrays.
UPSERT_FIELDS = ["project", "node_name", "namespace", "pod_name", "reported_at", "updated_at",
                 *POD_COLUMNS.values()]  # fmt: skip


@functools.cache
def _status_upsert_sql() -> str:
    """One INSERT ... SELECT unnest(arrays) ON CONFLICT for a whole message, built from the
    model's own columns and types. A row whose stored pod has the same uid on another node is
    left alone (the WHERE) and so missing from RETURNING: that is a takeover, refused."""
    fields = [PodSliceStatus._meta.get_field(name) for name in UPSERT_FIELDS]
    columns = [f.column for f in fields]
    arrays = ", ".join(f"%s::{f.db_type(connection)}[]" for f in fields)
    updates = ", ".join(
        f"{c} = EXCLUDED.{c}" for c in columns if c not in ("namespace", "pod_name")
    )
    table = PodSliceStatus._meta.db_table
    # Built from the model's names and types only; every value is a bound parameter.
    return (
        f"INSERT INTO {table} AS s ({', '.join(columns)}) SELECT * FROM unnest({arrays}) "  # noqa: S608
        f"ON CONFLICT (namespace, pod_name) DO UPDATE SET {updates} "
        "WHERE NOT (s.pod_uid = EXCLUDED.pod_uid AND s.node_name <> EXCLUDED.node_name) "
        "RETURNING namespace, pod_name"
    )


class TokenExistsError(Exception):
    """The node already has a token; rotating must be explicit."""


def issue_node_token(node_name: str, created_by=None, rotate: bool = False) -> str:
    """Create (or with rotate=True replace) the node's token; returns the plaintext once.

    Audited in the same transaction (`node_token.issue` / `node_token.rotate`, by prefix only:
    the secret never reaches the log); `created_by` None is the command line."""
    token = secrets.token_urlsafe(TOKEN_BYTES)
    values = {
        "token_hash": hash_token(token),
        "token_prefix": token[:8],
        "created_by": created_by,
        "revoked_at": None,
    }
    with transaction.atomic():
        row, created = NodeToken.objects.select_for_update().get_or_create(
            node_name=node_name, defaults=values
        )
        before = {}
        if not created:
            if not rotate:
                raise TokenExistsError(
                    f"node {node_name} already has a token; rotate it to replace it "
                    "(the old token stops working at once)"
                )
            before = _token_facts(row)
            NodeToken.objects.filter(pk=row.pk).update(created_at=timezone.now(), **values)
            row.refresh_from_db()
        record_audit(
            actor=created_by,
            action="node_token.issue" if created else "node_token.rotate",
            obj=row,
            before=before,
            after=_token_facts(row),
            system="manage.py create_node_token",
        )
    return token


def _token_facts(row: NodeToken) -> dict[str, object]:
    """What the audit row says of a token: never its hash or secret."""
    return {
        "node": row.node_name,
        "token_prefix": row.token_prefix,
        "revoked": row.revoked_at is not None,
    }


def revoke_node_token(node_name: str, actor=None) -> bool:
    """Revoke; True if a live token was revoked (CAS: only a not-yet-revoked row changes).
    A revocation that changed a row is audited (`node_token.revoke`) in the same transaction."""
    with transaction.atomic():
        revoked = NodeToken.objects.filter(node_name=node_name, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        if revoked:
            row = NodeToken.objects.get(node_name=node_name)
            record_audit(
                actor=actor,
                action="node_token.revoke",
                obj=row,
                before={**_token_facts(row), "revoked": False},
                after=_token_facts(row),
                system="manage.py",
            )
    return bool(revoked)


def authenticate_node(node_name: str, token: str) -> NodeToken | None:
    """The node's live token row if `token` is its token, else None (constant-time compare)."""
    row = NodeToken.objects.filter(node_name=node_name, revoked_at__isnull=True).first()
    if row is None:
        hmac.compare_digest(hash_token(token), "0" * 64)  # same work whether or not it exists
        return None
    return row if hmac.compare_digest(hash_token(token), row.token_hash) else None


@dataclass(frozen=True)
class Published:
    """One event for a project's channel group."""

    project_id: int
    event: ProjectEvent


def _event(project_id: int, node: str, pod: PodReport, row: LiveRow) -> Published:
    """The pod's reported fields plus the page's message, encoded once here for every viewer."""
    text = json.dumps({"type": "row", **row.as_json()})
    return Published(project_id, PodStatusEvent(type="pod.status", node=node, text=text, **pod))


def _removed_event(project_id: int, removed: RemovedPod) -> Published:
    text = json.dumps({"type": "remove", "key": f"{removed['namespace']}/{removed['pod']}"})
    gone = PodRemovedEvent(
        type="pod.removed", namespace=removed["namespace"], pod=removed["pod"], text=text
    )
    return Published(project_id, gone)


def _refused(pod: PodReport | RemovedPod, reason: str, retry: bool) -> RefusedEntry:
    return RefusedEntry(namespace=pod["namespace"], pod=pod["pod"], reason=reason, retry=retry)


def _sort_by_binding(
    node_name: str, msg: StatusMessage, projects: dict[str, int]
) -> tuple[list[PodReport], list[RefusedEntry]]:
    """The pods of `msg` the cluster bound to `node_name`, and the others
    refused one by one: a foreign namespace for good; a pod the watcher has not bound yet, or
    bound elsewhere or under another uid as the watcher last saw it, for now (the watcher may
    lag the agent: the agent retries until the binding catches up or the pod is gone)."""
    refused, ours = [], []
    for p in msg.pods:
        if p["namespace"] not in projects:
            refused.append(_refused(p, "namespace is not a Tranche project (foreign pod)", False))
        else:
            ours.append(p)
    try:
        bound = pod_bindings((projects[p["namespace"]], p["pod"]) for p in ours)
    except redis.RedisError as exc:
        reason = f"cannot check which node the pod is bound to now (Redis: {exc}); resend later"
        return [], refused + [_refused(p, reason, True) for p in ours]
    accepted = []
    for p in ours:
        binding = bound.get((projects[p["namespace"]], p["pod"]))
        if binding is None or not binding["node"]:
            reason = "the cluster shows no such pod scheduled to a node (yet); not stored"
        elif binding["node"] != node_name:
            reason = (
                f"pod runs on node {binding['node']}, not {node_name} (the cluster bound it there)"
            )
        elif binding["uid"] and binding["uid"] != p["uid"]:
            reason = f"uid {p['uid']} is not the pod the cluster runs ({binding['uid']})"
        else:
            accepted.append(p)
            continue
        refused.append(_refused(p, reason, True))
    return accepted, refused


def _upsert_statuses(node_name: str, rows: list[PodSliceStatus]) -> set[tuple[str, str]]:
    """Write `rows`; the (namespace, pod) written. A row missing is the same pod stored for
    another node (a takeover), left alone by the upsert's WHERE."""
    now = timezone.now()
    for row in rows:
        row.updated_at = now
    values = [[getattr(row, f.attname) for row in rows]
              for f in (PodSliceStatus._meta.get_field(n) for n in UPSERT_FIELDS)]  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(_status_upsert_sql(), values)
        return set(cursor.fetchall())


@dataclass(frozen=True)
class Recorded:
    """What one frame did: events to publish, and the entries refused (the rest were applied)."""

    events: list[Published]
    refused: list[RefusedEntry]
    seen: list[Published]  # node.seen for every project with a row on the node
    # the frame's GPU health findings the portal did not believe (none of them stored)
    health_refused: list[health_admission.RefusedFinding] = field(default_factory=list)


@transaction.atomic
def record_status(node_name: str, msg: StatusMessage) -> Recorded:
    """Store the frame's GPUs and findings, and each of its pod entries and removals on its own:
    a refused entry (foreign, not bound yet, another node's) is listed in `refused` and changes
    nothing, the others are applied. One transaction: a database error stores nothing (the
    agent then resends every entry). Idempotent: re-recording a frame upserts the same rows."""
    namespaces = {p["namespace"] for p in msg.pods} | {r["namespace"] for r in msg.removed}
    projects = dict(Project.objects.filter(namespace__in=namespaces).values_list("namespace", "id"))
    accepted, refused = _sort_by_binding(node_name, msg, projects)
    reported = datetime.fromtimestamp(msg.ts, tz=UTC)
    # A pod listed twice is written once, with its last figures.
    latest = {(p["namespace"], p["pod"]): p for p in accepted}
    rows = [
        PodSliceStatus(
            project_id=projects[p["namespace"]],
            node_name=node_name,
            namespace=p["namespace"],
            pod_name=p["pod"],
            reported_at=reported,
            # an optional field an older agent leaves out is stored as its column's default
            **{column: p.get(field, POD_DEFAULTS[field]) for field, column in POD_COLUMNS.items()},
        )
        for p in latest.values()
    ]
    # One statement for the whole frame: an update_or_create per pod cost 4 queries each, 128
    # for a node's 32 pods, 50 ms per frame in the thread that also serves every page.
    written = _upsert_statuses(node_name, rows) if rows else set()
    gpu_names = {g["uuid"]: g["name"] for g in msg.gpus}  # every frame lists the node's GPUs
    events = []
    for row, p in zip(rows, latest.values(), strict=True):
        if (row.namespace, row.pod_name) in written:
            events.append(
                _event(row.project_id, node_name, p, pod_row(row, gpu_names.get(row.gpu_uuid, "")))
            )
        else:
            other = PodSliceStatus.objects.filter(namespace=row.namespace, pod_name=row.pod_name)
            where = other.values_list("node_name", flat=True).first()
            refused.append(_refused(p, f"pod runs on node {where}, not {node_name}", False))
    history.record_samples(
        [
            history.Sample(
                projects[p["namespace"]], p["namespace"], p["pod"], msg.ts,
                p["memory_used_bytes"], p["memory_limit_bytes"],
                p["compute_used_percent"], p["compute_target_percent"],
            )
            for p in accepted
            if (p["namespace"], p["pod"]) in written
        ]
    )  # fmt: skip
    for r in msg.removed:
        # Only this node's own pods can be removed by it; removing what is not stored is a no-op.
        deleted, _ = PodSliceStatus.objects.filter(
            namespace=r["namespace"], pod_name=r["pod"], node_name=node_name
        ).delete()
        if deleted and r["namespace"] in projects:
            events.append(_removed_event(projects[r["namespace"]], r))
    now = timezone.now()
    seen = {"last_seen_at": now, "gpus": msg.gpus, "dropped_messages": msg.dropped}
    health_refused = []
    if msg.findings:  # rare; the node's own agent is the only writer of its row
        # Checked before anything is stored: a node speaks only of its own GPUs and pods.
        findings, health_refused = health_admission.admit_health(node_name, msg.findings, msg.gpus)
        kept = NodeToken.objects.filter(node_name=node_name).values("findings", "refused_health")
        kept = kept.first() or {}
        seen["findings"] = [*(kept.get("findings") or []), *findings][-FINDINGS_KEPT:]
        if health_refused:
            seen["refused_health"] = health_admission.keep_refusals(
                health_refused, kept.get("refused_health")
            )
        for project_id, event in gpu_health.record_health(node_name, findings):
            events.append(Published(project_id, event))
    NodeToken.objects.filter(node_name=node_name).update(**seen)
    return Recorded(events, refused, _seen_events(node_name, now), health_refused)


def _seen_events(node_name: str, at: datetime) -> list[Published]:
    """node.seen for each project with a row on the node (one indexed query)."""
    text = json.dumps({"type": "seen", "node": node_name, "at": at.timestamp()})
    projects = (
        PodSliceStatus.objects.filter(node_name=node_name)
        .values_list("project_id", flat=True)
        .distinct()
    )
    return [
        Published(pid, NodeSeenEvent(type="node.seen", node=node_name, text=text))
        for pid in projects
    ]
