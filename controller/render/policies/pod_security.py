"""Policy `tranche-pod-security`: a workload whose pods Pod Security would refuse is refused itself.

Tenant namespaces enforce Pod Security `baseline` (`render.namespace`). Kubernetes applies it to
pods only: for a Deployment, StatefulSet, Job, CronJob or DaemonSet it merely warns, and the pods
the controller makes are then refused in the events of a ReplicaSet (or Job) the tenant never
looks at. This policy judges the pod template at the workload with the controls of `baseline`
that the other policies do not already hold (`pod_hardening`: hostPath, privileged, added
capabilities; `seccomp`: profiles), in the words Pod Security uses:
host namespaces, hostPort, forbidden AppArmor profile, seLinuxOptions, procMount, forbidden
sysctls. Pods themselves are left to Pod Security, which refuses them in these words.
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
    RESOURCE,
    container_names_where,
    pod_or_template_changed,
    pod_rules,
    pod_variables,
)

NAME = "tranche-pod-security"
LEVEL = 'PodSecurity "baseline:latest"'
HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
SELINUX_TYPES = ("container_t", "container_init_t", "container_kvm_t", "container_engine_t")
# Pod Security's "safe" sysctls (baseline, latest)
SAFE_SYSCTLS = (
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
)
POD_CONTEXT = f"{POD_SPEC}.securityContext"
WHERE = (
    "; the pods it makes would be refused, and only the events of the ReplicaSet or Job that "
    "makes them would say so. "
)


def _template_annotations() -> cel.Expr:
    """The annotations of the pod, or of the workload's pod template ({} when none)."""

    def of(meta: str) -> str:
        return cel.if_(
            cel.all_of(cel.has(meta), cel.has(f"{meta}.annotations")), f"{meta}.annotations", "{}"
        )

    return cel.if_(
        cel.eq(RESOURCE, cel.lit("pods")),
        f"dyn({of('object.metadata')})",
        cel.group(
            cel.if_(
                cel.has("dyn(object).spec.template"),
                cel.group(of("dyn(object).spec.template.metadata")),
                cel.group(
                    cel.if_(
                        cel.eq(RESOURCE, cel.lit("cronjobs")),
                        cel.group(of("dyn(object).spec.jobTemplate.spec.template.metadata")),
                        "{}",
                    )
                ),
            )
        ),
    )


def _field_is(context: str, field: str, value: str) -> cel.Expr:
    """`context.field.type == value`, each level present."""
    return cel.all_of(
        cel.has(context), cel.has(f"{context}.{field}"),
        cel.eq(f"{context}.{field}.type", cel.lit(value)),
    )  # fmt: skip


def _selinux_forbidden(context: str) -> cel.Expr:
    options = f"{context}.seLinuxOptions"
    return cel.all_of(
        cel.has(context),
        cel.has(options),
        cel.group(
            cel.any_of(
                cel.has(f"{options}.user"),
                cel.has(f"{options}.role"),
                cel.all_of(
                    cel.has(f"{options}.type"),
                    cel.not_(cel.group(cel.in_(f"{options}.type", cel.str_list(SELINUX_TYPES)))),
                ),
            )
        ),
    )


def _host_namespaces() -> cel.Expr:
    """`['hostNetwork=true', ...]` for each host namespace the pod spec asks for."""
    return cel.concat(
        *(
            cel.group(
                cel.if_(cel.set_and_true(f"{POD_SPEC}.{f}"), cel.str_list([f"{f}=true"]), "[]")
            )
            for f in HOST_NAMESPACES
        )
    )


def _variables() -> list[dict[str, str]]:
    sysctls = f"{POD_CONTEXT}.sysctls"
    return [
        *pod_variables(),
        variable("hostNamespaces", _host_namespaces()),
        variable(
            "hostPorts",
            container_names_where(
                cel.all_of(
                    cel.has("c.ports"),
                    cel.exists(
                        "c.ports",
                        "p",
                        cel.all_of(
                            cel.has("p.hostPort"),
                            cel.ne("p.hostPort", "0"),
                        ),
                    ),
                )
            ),
        ),
        variable("annotations", _template_annotations()),
        variable(
            "appArmorUnconfined",
            cel.concat(
                cel.group(
                    cel.if_(
                        _field_is(POD_CONTEXT, "appArmorProfile", "Unconfined"),
                        cel.str_list(["(pod)"]),
                        "[]",
                    )
                ),
                container_names_where(
                    _field_is("c.securityContext", "appArmorProfile", "Unconfined")
                ),
                cel.keys_where(
                    "variables.annotations",
                    "k",
                    cel.all_of(
                        cel.call("k", "startsWith", cel.lit(APPARMOR_ANNOTATION)),
                        cel.eq(cel.index("variables.annotations", "k"), cel.lit("unconfined")),
                    ),
                ),
            ),
        ),
        variable(
            "seLinux",
            cel.concat(
                cel.group(cel.if_(_selinux_forbidden(POD_CONTEXT), cel.str_list(["(pod)"]), "[]")),
                container_names_where(_selinux_forbidden("c.securityContext")),
            ),
        ),
        variable(
            "procMount",
            container_names_where(
                cel.all_of(
                    cel.has("c.securityContext"),
                    cel.has("c.securityContext.procMount"),
                    cel.ne("c.securityContext.procMount", cel.lit("Default")),
                )
            ),
        ),
        variable(
            "sysctls",
            cel.if_(
                cel.all_of(cel.has(POD_CONTEXT), cel.has(sysctls)),
                f"{sysctls}.filter(s, !(s.name in {cel.str_list(SAFE_SYSCTLS)})).map(s, s.name)",
                "[]",
            ),
        ),
    ]


def _violation(names: str, control: str, fix: str) -> dict[str, Any]:
    """Refuse when `variables.<names>` is not empty, in Pod Security's words."""
    return deny_unless(
        cel.is_empty(f"variables.{names}"),
        message_expression=cel.message(
            REQUESTED_OBJECT,
            f" would violate {LEVEL}: {control} (",
            cel.joined(f"variables.{names}"),
            ")" + WHERE + fix,
        ),
        reason="Forbidden",
    )


def render_pod_security_policy() -> dict[str, Any]:
    """Workloads whose pod template Pod Security `baseline` would refuse."""
    return render_policy(
        NAME,
        {
            # workloads only: Pod Security itself refuses pods, in these words
            "matchConstraints": {"resourceRules": pod_rules()["resourceRules"][1:]},
            "matchConditions": [pod_or_template_changed()],
            "variables": _variables(),
            "validations": [
                _violation(
                    "hostNamespaces", "host namespaces",
                    "Remove hostNetwork, hostPID and hostIPC from the pod template.",
                ),
                _violation(
                    "hostPorts", "hostPort (containers)",
                    "Remove hostPort from the containers' ports; reach them through a Service.",
                ),
                _violation(
                    "appArmorUnconfined", "forbidden AppArmor profile Unconfined",
                    "Use appArmorProfile type RuntimeDefault, or leave it out.",
                ),
                _violation(
                    "seLinux", "seLinuxOptions",
                    "Remove seLinuxOptions user and role; a type must be one of "
                    + ", ".join(SELINUX_TYPES) + ".",
                ),
                _violation(
                    "procMount", "procMount (containers)",
                    "Remove securityContext.procMount (Default applies).",
                ),
                _violation(
                    "sysctls", "forbidden sysctls",
                    "Set only the sysctls Pod Security calls safe, or none.",
                ),
            ],
        },
    )  # fmt: skip
