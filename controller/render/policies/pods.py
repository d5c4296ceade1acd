"""What the pod policies match and how they reach every container of a pod."""

from __future__ import annotations

from typing import Any

from controller.render.policies import cel
from controller.render.policies.objects import variable

CONTAINERS = "variables.containers"


def pod_rules() -> dict[str, Any]:
    """Pods, on create and update, including `kubectl debug`'s ephemeral containers."""
    return {
        "resourceRules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["pods", "pods/ephemeralcontainers"],
            }
        ]
    }


def all_containers(pod_spec: str) -> cel.Expr:
    """Containers, init containers and ephemeral containers of `pod_spec`, in one list."""
    return cel.concat(
        f"{pod_spec}.containers",
        cel.or_default(f"{pod_spec}.initContainers", "[]"),
        cel.or_default(f"{pod_spec}.ephemeralContainers", "[]"),
    )


def containers_variable() -> dict[str, str]:
    """`variables.containers`: every container of the pod under review."""
    return variable("containers", all_containers("object.spec"))


def container_names_where(predicate: str) -> cel.Expr:
    """Names of the pod's containers (each bound to `c`) for which `predicate` holds."""
    return cel.names_where(CONTAINERS, predicate)


def containers_message(names_variable: str, text: str) -> cel.Expr:
    """`Container(s) a, b <text>`: the tenant sees which of their containers is refused."""
    return cel.message("Container(s) ", cel.joined(f"variables.{names_variable}"), text)
