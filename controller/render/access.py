"""Cluster access of portal users: a ServiceAccount per (user, project) and RoleBindings by rights.

Each member of the project's organization gets a ServiceAccount `u-<username>-<id>-<generation>`
(the portal mints short-lived tokens for it with the TokenRequest API). Rights are bound per
kind of access, one RoleBinding each, naming only the accounts with that access:

- `tranche-access-edit` → ClusterRole `tranche-tenant` (owners and members);
- `tranche-access-view` → ClusterRole `tranche-tenant-view` (viewers; suspended members too);
- `tranche-access-suspended` → ClusterRole `tranche-tenant-suspended` (members of a suspended
  organization: delete their workloads, nothing else);
- `tranche-portal-tokens` → ClusterRole `tranche-portal-tokens` for the portal's identity, so
  the portal can mint tokens in project namespaces and nowhere else, and read what pre-flight
  checks there (the quota, the volume claims);
- `tranche-portal-impersonate` → Role `tranche-portal-impersonate` (namespaced: it names the
  project's own accounts, since RBAC has no name prefixes), so pre-flight's dry run acts as a
  member's account and never as `default` or anyone else's identity. Absent when the project
  has no accounts: a rule with no resourceNames would mean every name.

A removed member's or revoked generation's account leaves the desired set: the prune deletes it
and its binding subject, so its tokens lose their rights as soon as RBAC sees the binding change
and are refused outright once the account is gone (docs/cluster-access.md).
"""

from __future__ import annotations

from typing import Any

from controller.render.rbac import TENANT_RULES
from controller.render.spec import ProjectSpec
from tranche.claims import platform_labels, project_labels
from tranche.names import (
    ANNOTATION_PORTAL_USER,
    LABEL_COMPONENT,
    PORTAL_SERVICE_ACCOUNT,
    PORTAL_TOKENS_ROLE,
    TENANT_ROLE,
    TENANT_SUSPENDED_ROLE,
    TENANT_VIEW_ROLE,
)

_READ = ["get", "list", "watch"]
_GONE = ["delete", "deletecollection"]
# Readable by every member: what the tenant role covers, minus secrets (viewers see no
# credentials) and status subresources.
VIEW_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": rule["apiGroups"],
        "resources": [r for r in rule["resources"] if r not in ("secrets", "pods/status")],
        "verbs": _READ,
    }
    for rule in TENANT_RULES
    if not any(r.endswith("/scale") for r in rule["resources"])
]
SUSPENDED_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": _GONE},
    {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets", "replicasets"],
     "verbs": _GONE},
    {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": _GONE},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": _GONE},
]  # fmt: skip
PORTAL_TOKEN_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
    # pre-flight (portal/preflight/gather.py): GET the project's quota, LIST its volume claims
    {"apiGroups": [""], "resources": ["resourcequotas"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["list"]},
]
BINDINGS = (
    ("tranche-access-edit", TENANT_ROLE, ("edit",)),
    ("tranche-access-view", TENANT_VIEW_ROLE, ("view", "suspended")),
    ("tranche-access-suspended", TENANT_SUSPENDED_ROLE, ("suspended",)),
)
PORTAL_BINDING = "tranche-portal-tokens"
PORTAL_IMPERSONATE = "tranche-portal-impersonate"


def _cluster_role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": platform_labels()},
        "rules": rules,
    }


def render_access_cluster_roles() -> list[dict[str, Any]]:
    """The read-only, suspended and portal-token ClusterRoles (platform-wide, bound per project)."""
    return [
        _cluster_role(TENANT_VIEW_ROLE, VIEW_RULES),
        _cluster_role(TENANT_SUSPENDED_ROLE, SUSPENDED_RULES),
        _cluster_role(PORTAL_TOKENS_ROLE, PORTAL_TOKEN_RULES),
    ]


def _labels(spec: ProjectSpec) -> dict[str, str]:
    return {**project_labels(spec), LABEL_COMPONENT: "access"}


def _binding(spec: ProjectSpec, name: str, role: str, subjects: list[dict[str, str]]):
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": spec.namespace, "labels": _labels(spec)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    }


def render_access(spec: ProjectSpec) -> list[dict[str, Any]]:
    """ServiceAccounts of the project's people, then one RoleBinding per kind of access that has
    anyone in it, then the portal's token binding."""
    accounts = sorted(spec.accounts, key=lambda a: a.name)
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {
                "name": a.name,
                "namespace": spec.namespace,
                "labels": _labels(spec),
                "annotations": {ANNOTATION_PORTAL_USER: a.person},
            },
            # tokens come from the TokenRequest API only: no pod may mount this identity
            "automountServiceAccountToken": False,
        }
        for a in accounts
    ]
    for name, role, rights in BINDINGS:
        subjects = [
            {"kind": "ServiceAccount", "name": a.name, "namespace": spec.namespace}
            for a in accounts
            if a.rights in rights
        ]
        if subjects:
            objects.append(_binding(spec, name, role, subjects))
    portal_ns, portal_sa = PORTAL_SERVICE_ACCOUNT
    portal = [{"kind": "ServiceAccount", "name": portal_sa, "namespace": portal_ns}]
    objects.append(_binding(spec, PORTAL_BINDING, PORTAL_TOKENS_ROLE, portal))
    if accounts:
        objects.append(_impersonate_role(spec, [a.name for a in accounts]))
        binding = _binding(spec, PORTAL_IMPERSONATE, PORTAL_IMPERSONATE, portal)
        binding["roleRef"]["kind"] = "Role"
        objects.append(binding)
    return objects


def _impersonate_role(spec: ProjectSpec, names: list[str]) -> dict[str, Any]:
    """Impersonating exactly the project's member accounts (pre-flight's dry run as the tenant).
    Impersonating a ServiceAccount's user name needs `impersonate` on that account; its groups
    are implied by the API server, so no group rule is needed."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {
            "name": PORTAL_IMPERSONATE,
            "namespace": spec.namespace,
            "labels": _labels(spec),
        },
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["serviceaccounts"],
                "resourceNames": sorted(names),
                "verbs": ["impersonate"],
            }
        ],
    }
