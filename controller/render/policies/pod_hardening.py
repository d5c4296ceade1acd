"""Policy `tranche-pod-hardening`: pods cannot bypass the slice's interception or reach the host.

Refused, in pods and in the pod templates of workloads:
- environment that steers the container runtime's GPU hooks (NVIDIA_*) or the dynamic loader
  (LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH), and the CUDA_*/TRANCHE_* names, whether written in
  `env` or brought in by `envFrom` (whose ConfigMap/Secret a policy cannot read: it must carry a
  prefix that cannot spell one of those names);
- volumes mounted at, inside or above the paths where the CDI spec puts the interception core,
  its preload file, the slice config and the shared region (a volume there hides them);
- hostPath volumes, privileged containers and added capabilities.
docs/admission.md says why the other variables a tenant sets cannot matter.
"""

from __future__ import annotations

import posixpath
from typing import Any

from controller.render.policies import cel
from controller.render.policies.objects import deny_unless, render_policy, variable
from controller.render.policies.pods import (
    POD_SPEC,
    container_names_where,
    containers_message,
    pod_or_template_changed,
    pod_rules,
    pod_variables,
)
from tranche.slice_paths import (
    CONFIG_IN_CONTAINER,
    CORE_IN_CONTAINER,
    PRELOAD_IN_CONTAINER,
    REGION_IN_CONTAINER,
)

NAME = "tranche-pod-hardening"
FORBIDDEN_ENV_NAMES = ("LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH")
FORBIDDEN_ENV_PREFIXES = ("NVIDIA_", "CUDA_", "TRANCHE_")
# Images alias these folders: /var/run is a link to /run, and /lib one to /usr/lib (merged /usr).
FOLDER_ALIASES = {"/var/run/": "/run/", "/usr/lib/": "/lib/"}


def _with_aliases(folder: str) -> tuple[str, ...]:
    """`folder` and the other spellings images give it."""
    aliases = [
        alias + folder.removeprefix(real)
        for real, alias in FOLDER_ALIASES.items()
        if folder.startswith(real)
    ]
    return (folder, *aliases)


# No volume at, inside or above these: the preload file, and the folders of the core, the slice
# config and the region, as the CDI spec mounts them (tranche.slice_paths).
SLICE_PATHS = (
    PRELOAD_IN_CONTAINER,
    *(
        path
        for mounted in (CONFIG_IN_CONTAINER, CORE_IN_CONTAINER, REGION_IN_CONTAINER)
        for path in _with_aliases(posixpath.dirname(mounted))
    ),
)
# A mount path in plain form: absolute, no empty, `.` or `..` segment, no trailing slash.
PLAIN_PATH = "^(/[^/]+)+$"
DOT_SEGMENT = "/\\.\\.?(/|$)"

FORBIDDEN_ENV_TEXT = (
    "LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH or an NVIDIA_*, CUDA_* or TRANCHE_* variable"
)
WHY_ENV = (
    "These decide which GPU, which driver features and which libraries a process gets, so "
    "Tranche sets them itself."
)


def _forbidden_env(name: str) -> cel.Expr:
    return cel.any_of(
        cel.in_(name, cel.str_list(FORBIDDEN_ENV_NAMES)),
        cel.starts_with_any(name, FORBIDDEN_ENV_PREFIXES),
    )


def _prefix_can_spell_forbidden(prefix: str) -> cel.Expr:
    """`prefix` + some key could be a forbidden name (the key is unknown to the policy)."""
    return cel.any_of(
        cel.exists(cel.str_list(FORBIDDEN_ENV_NAMES), "n", cel.call("n", "startsWith", prefix)),
        cel.exists(
            cel.str_list(FORBIDDEN_ENV_PREFIXES),
            "q",
            cel.any_of(cel.call("q", "startsWith", prefix), cel.call(prefix, "startsWith", "q")),
        ),
    )


def _hides_slice_files(path: str) -> cel.Expr:
    """A mount at `path` could cover a file the slice depends on: at, inside or above one of
    SLICE_PATHS, or written so that a prefix comparison cannot tell."""
    slash = cel.lit("/")
    return cel.any_of(
        cel.not_(cel.call(path, "matches", cel.lit(PLAIN_PATH))),
        cel.call(path, "matches", cel.lit(DOT_SEGMENT)),
        cel.exists(
            cel.str_list(SLICE_PATHS),
            "x",
            cel.any_of(
                cel.eq(path, "x"),
                cel.call("x", "startsWith", cel.concat(path, slash)),
                cel.call(path, "startsWith", cel.concat("x", slash)),
            ),
        ),
    )


def _mounts_over_slice(container: str) -> cel.Expr:
    mounts, devices = f"{container}.volumeMounts", f"{container}.volumeDevices"
    return cel.any_of(
        cel.group(
            cel.all_of(cel.has(mounts), cel.exists(mounts, "m", _hides_slice_files("m.mountPath")))
        ),
        cel.group(
            cel.all_of(
                cel.has(devices), cel.exists(devices, "d", _hides_slice_files("d.devicePath"))
            )
        ),
    )


def _variables() -> list[dict[str, str]]:
    security = "c.securityContext"
    env_bad = cel.all_of(cel.has("c.env"), cel.exists("c.env", "e", _forbidden_env("e.name")))
    env_from_bad = cel.all_of(
        cel.has("c.envFrom"),
        cel.exists(
            "c.envFrom",
            "s",
            cel.any_of(cel.not_(cel.has("s.prefix")), _prefix_can_spell_forbidden("s.prefix")),
        ),
    )
    added = f"{security}.capabilities.add"
    caps = cel.all_of(
        cel.has(security),
        cel.has(f"{security}.capabilities"),
        cel.has(added),
        cel.gt(cel.size(added), "0"),
    )
    return [
        *pod_variables(),
        variable("envContainers", container_names_where(env_bad)),
        variable("envFromContainers", container_names_where(env_from_bad)),
        variable("mountContainers", container_names_where(_mounts_over_slice("c"))),
        variable(
            "privileged",
            container_names_where(cel.set_and_true(security, f"{security}.privileged")),
        ),
        variable("capContainers", container_names_where(caps)),
    ]


def render_pod_policy() -> dict[str, Any]:
    """Pods and workloads cannot bypass the slice's interception or reach the host."""
    volumes = f"{POD_SPEC}.volumes"
    return render_policy(
        NAME,
        {
            "matchConstraints": pod_rules(),
            "matchConditions": [pod_or_template_changed()],
            "variables": _variables(),
            "validations": [
                deny_unless(
                    cel.is_empty("variables.envContainers"),
                    message_expression=containers_message(
                        "envContainers",
                        f" set {FORBIDDEN_ENV_TEXT}. {WHY_ENV} Remove them from env.",
                    ),
                    reason="Forbidden",
                ),
                deny_unless(
                    cel.is_empty("variables.envFromContainers"),
                    message_expression=containers_message(
                        "envFromContainers",
                        " load variables with envFrom without a prefix, or with a prefix that "
                        f"could spell {FORBIDDEN_ENV_TEXT} name. Tranche cannot see what a "
                        "ConfigMap or Secret holds, and those variables decide which GPU, which "
                        "driver features and which libraries a process gets. Give each envFrom "
                        "a prefix such as APP_, or list the variables you need under env.",
                    ),
                    reason="Forbidden",
                ),
                deny_unless(
                    cel.is_empty("variables.mountContainers"),
                    message_expression=containers_message(
                        "mountContainers",
                        " mount a volume at, inside or above a path where Tranche puts the GPU "
                        "slice's interception library and limits (/etc/ld.so.preload, "
                        "/etc/tranche, /usr/lib/tranche, /var/run/tranche, or a folder above "
                        "them such as /etc or /var/run), or at a path not written in plain form "
                        "(//, . or ..). A volume there would hide the slice's limits. Mount it "
                        "elsewhere, e.g. /data or a folder of its own such as /etc/myapp.",
                    ),
                    reason="Forbidden",
                ),
                deny_unless(
                    cel.any_of(
                        cel.not_(cel.has(volumes)),
                        cel.not_(cel.exists(volumes, "v", cel.has("v.hostPath"))),
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
