"""Cluster access writes: issue a kubeconfig, revoke a user's credentials.

`issue_kubeconfig` mints one token per project the user can reach (TokenRequest, expiry
CLUSTER_ACCESS_TTL_SECONDS) and records only when it did so; the kubeconfig is returned to the
caller and never stored or logged. `revoke_credentials` raises the user's generation (compare-
and-swap on the row) and, on commit, asks the controller to reconcile each of the user's
projects, which deletes the old ServiceAccounts: every token issued before stops working.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import yaml
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from portal.access import cluster
from portal.access.models import ClusterAccess
from portal.audit.services import record_audit
from portal.core import queue
from portal.tenants.errors import ServiceError
from portal.tenants.models import Project
from portal.tenants.selectors import projects_of
from tranche.naming import account_name


@dataclass
class IssuedKubeconfig:
    """A kubeconfig to hand over once, and what it holds."""

    text: str
    contexts: list[str]
    expires_at: datetime | None
    not_ready: list[Project] = field(default_factory=list)


def generation_of(user) -> int:
    """The user's current credential generation (1 until they first revoke)."""
    row = ClusterAccess.objects.filter(user=user).values_list("generation", flat=True).first()
    return row or 1


def context_name(project: Project) -> str:
    """kubectl context of a project: `<organization>/<project>` slugs."""
    return f"{project.organization.slug}/{project.slug}"


def _kubeconfig(endpoint: cluster.Endpoint, entries: list[tuple[Project, str]]) -> str:
    name = settings.CLUSTER_NAME
    cluster_entry: dict = {"server": endpoint.server}
    if endpoint.ca_data:
        cluster_entry["certificate-authority-data"] = endpoint.ca_data
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster_entry}],
        "users": [{"name": context_name(p), "user": {"token": token}} for p, token in entries],
        "contexts": [
            {
                "name": context_name(p),
                "context": {"cluster": name, "user": context_name(p), "namespace": p.namespace},
            }
            for p, _ in entries
        ],
        "current-context": context_name(entries[0][0]) if entries else "",
        "preferences": {},
    }
    return yaml.safe_dump(doc, sort_keys=False)


def issue_kubeconfig(user) -> IssuedKubeconfig:
    """A kubeconfig with one context per project the user can reach, tokens valid for the TTL.

    A project whose account the controller has not made yet is left out and named in
    `not_ready` (its reconcile is sent again). The cluster being unreachable is a ServiceError
    the page shows; nothing is recorded then."""
    projects = list(projects_of(user).order_by("organization__slug", "slug"))
    if not projects:
        raise ServiceError(
            "You are not a member of any project yet, so there is no cluster access to download. "
            "Sign up for an organization or ask an owner to invite you."
        )
    ttl = settings.CLUSTER_ACCESS_TTL_SECONDS
    generation = generation_of(user)
    entries, not_ready, expiries = [], [], []
    try:
        with cluster.session() as api:
            endpoint = cluster.endpoint(api)
            account = account_name(user.get_username(), user.pk, generation)
            for project in projects:
                try:
                    token, expires = cluster.request_token(api, project.namespace, account, ttl)
                except cluster.AccountNotReadyError:
                    not_ready.append(project)
                    queue.send_reconcile(project.pk)
                    continue
                entries.append((project, token))
                expiries.append(expires)
    except cluster.ClusterUnavailableError as exc:
        raise ServiceError(
            f"The cluster could not issue credentials right now ({exc}). Nothing was issued; "
            "try again in a minute, and contact support if it persists."
        ) from None
    if not entries:
        raise ServiceError(
            "Your access to the cluster is still being set up (it takes a few seconds after you "
            "join an organization, revoke credentials or a project is created). Try again shortly."
        )
    expires_at = min(expiries) if all(expiries) else timezone.now() + timedelta(seconds=ttl)
    with transaction.atomic():
        row, _ = ClusterAccess.objects.get_or_create(user=user)
        ClusterAccess.objects.filter(pk=row.pk).update(
            issued_at=timezone.now(), expires_at=expires_at
        )
        record_audit(
            actor=user,
            action="cluster_access.issue",
            obj=row,
            after={"contexts": [context_name(p) for p, _ in entries], "expires": str(expires_at)},
            system="portal",
        )
    return IssuedKubeconfig(
        text=_kubeconfig(endpoint, entries),
        contexts=[context_name(p) for p, _ in entries],
        expires_at=expires_at,
        not_ready=not_ready,
    )


@transaction.atomic
def revoke_credentials(user) -> int:
    """Invalidate every kubeconfig the user downloaded; returns the new generation.

    Idempotent in effect: each call makes a fresh generation, the old accounts are deleted by
    the reconciles sent on commit (and by the periodic resync if a message is lost)."""
    row, _ = ClusterAccess.objects.get_or_create(user=user)
    ClusterAccess.objects.filter(pk=row.pk).update(
        generation=F("generation") + 1, revoked_at=timezone.now(), expires_at=None
    )
    row.refresh_from_db()
    record_audit(
        actor=user,
        action="cluster_access.revoke",
        obj=row,
        after={"generation": row.generation},
        system="portal",
    )
    for project_id in projects_of(user).values_list("pk", flat=True):
        queue.enqueue_reconcile(project_id)
    return row.generation
