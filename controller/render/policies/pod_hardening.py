"""Policy `tranche-pod-hardening`: pods cannot bypass the slice's interception or reach the host.

Refused: environment variables that steer which GPU or which limits a process gets, hostPath
volumes, privileged containers and added capabilities.
"""

from __future__ import annotations

from typing import Any

from controller.render.policies import cel
from controller.render.policies.objects import deny_unless, render_policy, variable
from controller.render.policies.pods import (
    container_names_where,
    containers_message,
    containers_variable,
    pod_rules,
)

NAME = "tranche-pod-hardening"
FORBIDDEN_ENV_NAMES = ("LD_PRELOAD", "NVIDIA_VISIBLE_DEVICES")
FORBIDDEN_ENV_PREFIXES = ("CUDA_", "TRANCHE_")


def _forbidden_env(name: str) -> cel.Expr:
    return cel.any_of(
        cel.in_(name, cel.str_list(FORBIDDEN_ENV_NAMES)),
        cel.starts_with_any(name, FORBIDDEN_ENV_PREFIXES),
    )


def render_pod_policy() -> dict[str, Any]:
    """Pods cannot bypass the slice's interception or reach the host."""
    security = "c.securityContext"
    env_bad = cel.all_of(cel.has("c.env"), cel.exists("c.env", "e", _forbidden_env("e.name")))
    privileged = cel.set_and_true(security, f"{security}.privileged")
    added = f"{security}.capabilities.add"
    caps = cel.all_of(
        cel.has(security),
        cel.has(f"{security}.capabilities"),
        cel.has(added),
        cel.gt(cel.size(added), "0"),
    )
    return render_policy(
        NAME,
        {
            "matchConstraints": pod_rules(),
            "variables": [
                containers_variable(),
                variable("envContainers", container_names_where(env_bad)),
                variable("privileged", container_names_where(privileged)),
                variable("capContainers", container_names_where(caps)),
            ],
            "validations": [
                deny_unless(
                    cel.is_empty("variables.envContainers"),
                    message_expression=containers_message(
                        "envContainers",
                        " set LD_PRELOAD, NVIDIA_VISIBLE_DEVICES or a CUDA_*/TRANCHE_* variable. "
                        "These control which GPU and which slice limits a process gets, so "
                        "Tranche sets them itself. Remove them from env.",
                    ),
                    reason="Forbidden",
                ),
                deny_unless(
                    cel.any_of(
                        cel.not_(cel.has("object.spec.volumes")),
                        cel.not_(cel.exists("object.spec.volumes", "v", cel.has("v.hostPath"))),
                    ),
                    message="hostPath volumes are not allowed in Tranche projects: they expose "
                    "the node's files, including other tenants' GPU state. Use a "
                    "PersistentVolumeClaim or an emptyDir instead.",
                    reason="Forbidden",
                ),
                deny_unless(
                    cel.is_empty("variables.privileged"),
                    message_expression=containers_message(
                        "privileged",
                        " run privileged, which would give them every GPU and the host. Remove "
                        "securityContext.privileged.",
                    ),
                    reason="Forbidden",
                ),
                deny_unless(
                    cel.is_empty("variables.capContainers"),
                    message_expression=containers_message(
                        "capContainers",
                        " add Linux capabilities. Tranche projects run with the default set; "
                        "remove securityContext.capabilities.add.",
                    ),
                    reason="Forbidden",
                ),
            ],
        },
    )
