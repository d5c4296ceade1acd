"""Policy `tranche-pod-seccomp`: every tenant container runs under the runtime's default
seccomp profile.

The node's container runtime filters system calls with its default profile (`RuntimeDefault`;
the kubelet's `seccompDefault: true` gives it to pods that name no profile). That filter is what
refuses `unshare(CLONE_NEWUSER)`, `mount` and the other calls with which a process could remount
the slice's read-only files or reach around the interception core, so a tenant may not turn it
off: a pod or pod template asking for `Unconfined`, or for a `Localhost` profile (a file on the
node the tenant cannot see or vouch for, which may allow anything), at pod level or in any
container, is refused. Naming `RuntimeDefault`, or no profile at all, passes.

Pod Security `baseline` (the namespace's enforce level) refuses `Unconfined` on pods too, with
Kubernetes' words; it only warns for workloads and allows `Localhost`. This policy refuses both
on pods and workloads alike, with a message that says what to write instead.
"""

from __future__ import annotations

from typing import Any

from controller.render.policies import cel
from controller.render.policies.objects import (
    REQUESTED_OBJECT,
    deny_unless,
    render_policy,
    variable,
)
from controller.render.policies.pods import (
    POD_SPEC,
    container_names_where,
    containers_message,
    pod_or_template_changed,
    pod_rules,
    pod_variables,
)

NAME = "tranche-pod-seccomp"
ALLOWED = "RuntimeDefault"

WHY = (
    " Tranche runs every container under the container runtime's default seccomp profile "
    "(RuntimeDefault): it blocks the system calls, such as unshare and mount, with which a "
    "process could get around the GPU slice's limits. "
)


def _other_profile(security_context: str) -> cel.Expr:
    """`security_context` names a seccomp profile other than RuntimeDefault."""
    profile = f"{security_context}.seccompProfile"
    return cel.all_of(
        cel.has(security_context),
        cel.has(profile),
        cel.ne(f"{profile}.type", cel.lit(ALLOWED)),
    )


def render_seccomp_policy() -> dict[str, Any]:
    """Pods and pod templates may name no seccomp profile but RuntimeDefault."""
    pod_context = f"{POD_SPEC}.securityContext"
    return render_policy(
        NAME,
        {
            "matchConstraints": pod_rules(),
            "matchConditions": [pod_or_template_changed()],
            "variables": [
                *pod_variables(),
                variable(
                    "seccompContainers", container_names_where(_other_profile("c.securityContext"))
                ),
            ],
            "validations": [
                deny_unless(
                    cel.not_(cel.group(_other_profile(pod_context))),
                    message_expression=cel.message(
                        REQUESTED_OBJECT,
                        " asks for seccomp profile ",
                        cel.Expr(f"{pod_context}.seccompProfile.type"),
                        " in securityContext.seccompProfile." + WHY + "Set "
                        f"securityContext.seccompProfile.type to {ALLOWED}, or remove "
                        "seccompProfile: the default then applies.",
                    ),
                    reason="Forbidden",
                ),
                deny_unless(
                    cel.is_empty("variables.seccompContainers"),
                    message_expression=containers_message(
                        "seccompContainers",
                        " ask for a seccomp profile other than RuntimeDefault (Unconfined or "
                        "Localhost) in securityContext.seccompProfile." + WHY + "Set the "
                        f"container's securityContext.seccompProfile.type to {ALLOWED}, or "
                        "remove it: the default then applies.",
                    ),
                    reason="Forbidden",
                ),
            ],
        },
    )
