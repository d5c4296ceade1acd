"""The tenant ClusterRole (platform-wide, one) and the RoleBinding of each project namespace.

Tenants manage workloads and claims, read pods, logs and events; they get no exec/attach, no
write on quotas, limit ranges, claim templates (create only, checked by policy), roles or policies.
One ClusterRole bound per namespace (not a Role per namespace) lets the controller run with
`bind` on that one role instead of holding every tenant permission cluster-wide itself
(deploy/chart/tranche/rbac/rbac.yaml).
"""

from __future__ import annotations

from typing import Any

from controller.render.spec import ProjectSpec
from tranche.claims import platform_labels, project_labels
from tranche.names import TENANT_ROLE

_RW = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]
_RO = ["get", "list", "watch"]

TENANT_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [""],
        "resources": [
            "pods",
            "services",
            "configmaps",
            "secrets",
            "persistentvolumeclaims",
            "serviceaccounts",
        ],
        "verbs": _RW,
    },
    {"apiGroups": [""], "resources": ["pods/log", "pods/status"], "verbs": _RO},
    {
        "apiGroups": [""],
        "resources": ["events", "resourcequotas", "limitranges", "replicationcontrollers"],
        "verbs": _RO,
    },
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": _RO},
    {
        "apiGroups": ["apps"],
        "resources": ["deployments", "statefulsets", "replicasets"],
        "verbs": _RW,
    },
    {"apiGroups": ["apps"], "resources": ["deployments/scale", "statefulsets/scale"], "verbs": _RW},
    # read so that `kubectl get all` lists without Forbidden lines; tenants cannot make them
    {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": _RO},
    {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": _RO},
    {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": _RW},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": _RW},
    # create only: the claim policy admits the documented form; edits/deletes stay with us
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaimtemplates"],
        "verbs": [*_RO, "create"],
    },
]


def render_tenant_cluster_role() -> dict[str, Any]:
    """ClusterRole `tranche-tenant` with TENANT_RULES; bound in each project namespace."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": TENANT_ROLE, "labels": platform_labels()},
        "rules": TENANT_RULES,
    }


def render_role_binding(spec: ProjectSpec) -> dict[str, Any]:
    """Bind the tenant ClusterRole, in this namespace only, to the project's tenant group
    (`tranche.dev:tenant:<namespace>`)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": TENANT_ROLE,
            "namespace": spec.namespace,
            "labels": project_labels(spec),
        },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": TENANT_ROLE,
        },
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": spec.tenant_group}
        ],
    }
