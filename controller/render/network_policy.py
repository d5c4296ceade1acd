"""The project's default NetworkPolicy: its pods accept connections only from its own namespace
and from the platform's ingress.

Without it every pod of the cluster, any other tenant's included, could reach this project's
pods and Services. The policy selects every pod of the namespace and allows ingress from pods of
the same namespace and from the namespaces named in `spec.ingress_namespaces` (the platform's
ingress controller; matched by the `kubernetes.io/metadata.name` label the API server sets on
every namespace, which nobody can forge). Egress is left open: tenants pull images, reach the
internet and the API server. The tenant role grants no right on NetworkPolicies, and policy 4
(managed objects) refuses edits of this one to anyone but the platform.

Enforced only where the cluster's network plugin implements NetworkPolicy (docs/security.md).
"""

from __future__ import annotations

from typing import Any

from controller.render.spec import ProjectSpec
from tranche.claims import project_labels
from tranche.names import LABEL_COMPONENT

NAME = "tranche-default-ingress"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def render_network_policy(spec: ProjectSpec) -> dict[str, Any]:
    """Ingress from the project's own pods and the platform's ingress namespaces only."""
    sources: list[dict[str, Any]] = [{"podSelector": {}}]
    if spec.ingress_namespaces:
        sources.append(
            {
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": NAMESPACE_NAME_LABEL,
                            "operator": "In",
                            "values": sorted(spec.ingress_namespaces),
                        }
                    ]
                }
            }
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": NAME,
            "namespace": spec.namespace,
            "labels": {**project_labels(spec), LABEL_COMPONENT: "network"},
        },
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": sources}]},
    }
