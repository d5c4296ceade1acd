"""Pure naming rules: slugs and the Kubernetes namespace derived from organization + project.

The namespace is `t-<org>-<project>-<hash6>`: DNS-1123 label (lowercase alphanumerics and '-',
starts with a letter, ends alphanumeric, at most 63 characters). The hash covers the full pair of
slugs, so truncation never merges two projects and "a-b"/"c" never collides with "a"/"b-c".
"""

from __future__ import annotations

import hashlib
import re

from tranche.names import ACCOUNT_PREFIX

NAMESPACE_MAX = 63
_HASH_LEN = 6
_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_DASHES = re.compile(r"-{2,}")
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def dns_slug(text: str, max_len: int = 40, fallback: str = "x") -> str:
    """Lowercase DNS-safe slug of `text` (may be `fallback` when nothing usable is left)."""
    slug = _NOT_DNS.sub("-", text.lower())
    slug = _DASHES.sub("-", slug).strip("-")[:max_len].strip("-")
    return slug or fallback


def derive_namespace(org_slug: str, project_slug: str) -> str:
    """Namespace name for a project: unique per (org, project) pair, at most 63 characters."""
    digest = hashlib.sha256(f"{org_slug}/{project_slug}".encode()).hexdigest()[:_HASH_LEN]
    budget = NAMESPACE_MAX - len("t-") - len("-") - _HASH_LEN
    org = dns_slug(org_slug, max_len=24, fallback="org")
    project = dns_slug(project_slug, max_len=budget - len(org) - 1, fallback="p")
    return f"t-{org}-{project}-{digest}"


def account_name(username: str, user_id: int, generation: int) -> str:
    """ServiceAccount of a portal user in a project namespace: `u-<username>-<id>-<generation>`.

    The API server names a token's holder `system:serviceaccount:<namespace>:<this>`, so the
    username is there for people reading `kubectl auth whoami` and the audit log; the id keeps two
    usernames that slug alike apart; the generation changes when the user revokes, so the old
    account (and every token bound to its uid) is deleted and a new one made.
    """
    return (
        f"{ACCOUNT_PREFIX}{dns_slug(username, max_len=30, fallback='user')}-{user_id}-{generation}"
    )
