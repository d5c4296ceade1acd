"""What the pod policies match and how they reach every container of a pod or pod template.

Pods are judged, and so are the workloads that make them (Deployment, StatefulSet, DaemonSet,
ReplicaSet, ReplicationController, Job, CronJob): a pod refused only when a controller creates it
fails in events of a ReplicaSet the tenant never looks at, so the workload is refused up front
with the same message. `variables.podSpec` is the pod's spec or the template's, whichever the
request carries.
"""

from __future__ import annotations

from typing import Any

from controller.render.policies import cel
from controller.render.policies.objects import match_condition, variable

CONTAINERS = "variables.containers"
POD_SPEC = "variables.podSpec"
RESOURCE = "request.resource.resource"

# (API group, resources) of every workload whose pod template ends up as pods
WORKLOADS = (
    ("apps", ("deployments", "statefulsets", "daemonsets", "replicasets")),
    ("batch", ("jobs", "cronjobs")),
    ("", ("replicationcontrollers",)),
)


def pod_rules() -> dict[str, Any]:
    """Pods (incl. `kubectl debug`'s ephemeral containers) and workloads, on create and update."""
    rules = [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["pods", "pods/ephemeralcontainers"],
        }
    ]
    for group, resources in WORKLOADS:
        rules.append(
            {
                "apiGroups": [group],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": list(resources),
            }
        )
    return {"resourceRules": rules}


def _template(obj: str) -> cel.Expr:
    """The pod template of a workload `obj` (`dyn`: each kind keeps it at its own path)."""
    return cel.if_(
        cel.eq(RESOURCE, cel.lit("cronjobs")),
        f"dyn({obj}).spec.jobTemplate.spec.template",
        f"dyn({obj}).spec.template",
    )


def pod_or_template_changed() -> dict[str, str]:
    """Judge pods always, workloads when created or when their pod template changes: scaling,
    status and finalizer updates of a workload made before a rule existed must still pass."""
    return match_condition(
        "pod-or-new-template",
        cel.any_of(
            cel.eq(RESOURCE, cel.lit("pods")),
            cel.eq("oldObject", "null"),
            cel.group(cel.ne(cel.group(_template("object")), cel.group(_template("oldObject")))),
        ),
    )


def pod_spec_variable() -> dict[str, str]:
    """`variables.podSpec`: the pod's spec, or the spec of the workload's pod template."""
    return variable(
        "podSpec",
        cel.if_(
            cel.eq(RESOURCE, cel.lit("pods")),
            "object.spec",
            cel.group(
                cel.if_(
                    cel.has("dyn(object).spec.template"),
                    "dyn(object).spec.template.spec",
                    cel.group(
                        cel.if_(
                            cel.eq(RESOURCE, cel.lit("cronjobs")),
                            "dyn(object).spec.jobTemplate.spec.template.spec",
                            "{}",
                        )
                    ),
                )
            ),
        ),
    )


def all_containers(pod_spec: str) -> cel.Expr:
    """Containers, init containers and ephemeral containers of `pod_spec`, in one list."""
    return cel.concat(
        cel.or_default(f"{pod_spec}.containers", "[]"),
        cel.or_default(f"{pod_spec}.initContainers", "[]"),
        cel.or_default(f"{pod_spec}.ephemeralContainers", "[]"),
    )


def pod_variables() -> list[dict[str, str]]:
    """`variables.podSpec`, then `variables.containers`: every container under review."""
    return [pod_spec_variable(), variable("containers", all_containers(POD_SPEC))]


def container_names_where(predicate: str) -> cel.Expr:
    """Names of the containers (each bound to `c`) for which `predicate` holds."""
    return cel.names_where(CONTAINERS, predicate)


def containers_message(names_variable: str, text: str) -> cel.Expr:
    """`Container(s) a, b <text>`: the tenant sees which of their containers is refused."""
    return cel.message("Container(s) ", cel.joined(f"variables.{names_variable}"), text)
