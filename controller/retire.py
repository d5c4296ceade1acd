"""Remove a deleted project's namespace: cluster access first, then everything else.

Idempotent. A namespace is only touched if no project names it any more and it carries the
labels Tranche puts on project namespaces (a message can never make us delete anything else).
The RoleBindings and ServiceAccounts go first, explicitly: namespace deletion removes them too,
but only after kube-controller-manager gets to it, and tenants' tokens must stop now.
"""

from __future__ import annotations

import logging

from controller import desired
from controller.apply import Applier, shared_api_client
from tranche.names import LABEL_MANAGED_BY, LABEL_TENANT, MANAGED_BY

log = logging.getLogger(__name__)
ACCESS_KINDS = (
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("v1", "ServiceAccount"),
)


def retire_namespace(namespace: str, applier: Applier | None = None) -> list[str]:
    """Delete the access objects, then the namespace; returns what was deleted."""
    if desired.namespace_in_use(namespace):
        log.info("namespace %s still belongs to a project: kept", namespace)
        return []
    applier = applier or Applier(shared_api_client())
    live = applier.get("v1", "Namespace", namespace)
    labels = (live or {}).get("metadata", {}).get("labels", {})
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY or labels.get(LABEL_TENANT) != "true":
        log.info("namespace %s is absent or not a project namespace: nothing to do", namespace)
        return []
    deleted = []
    for kind in ACCESS_KINDS:
        for name in applier.list_managed(*kind, namespace=namespace):
            applier.delete(*kind, name, namespace)
            deleted.append(f"deleted {kind[1]}/{name}")
    applier.delete("v1", "Namespace", namespace)
    deleted.append(f"deleted Namespace/{namespace}")
    log.info("retired %s: %s", namespace, ", ".join(deleted))
    return deleted
