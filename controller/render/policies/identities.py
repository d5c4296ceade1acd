"""Policy `tranche-pod-identities`: no pod runs as a person's cluster account.

A person's account (`u-<username>-<id>-<generation>`, docs/cluster-access.md) is for kubectl
only. A pod naming it in `serviceAccountName` (or the older `serviceAccount`) would get that
person's identity through its automounted or projected token, and keep it: a member could run a
workload as the owner, and it would go on running as the owner after the member was removed,
since the kubelet keeps refreshing a pod's token for as long as the account exists. So pods, and
the workloads that make them, naming any account with the reserved prefix are refused, whoever
sends them: a controller creating pods from a workload made before this rule is refused too, so
such a workload gets no new pods.

Judged on create and whenever the pod template changes (`pods.pod_or_template_changed`); a pod's
account cannot change after creation.
"""

from __future__ import annotations

from typing import Any

from controller.render.policies import cel
from controller.render.policies.objects import deny_unless, render_policy, variable
from controller.render.policies.pods import (
    POD_SPEC,
    pod_or_template_changed,
    pod_rules,
    pod_spec_variable,
)
from tranche.names import ACCOUNT_PREFIX

NAME = "tranche-pod-identities"
ACCOUNT_FIELDS = ("serviceAccountName", "serviceAccount")  # the second is the deprecated alias


def _person_accounts() -> cel.Expr:
    """The reserved account names the pod spec asks for (empty when it names none)."""
    named = [
        cel.if_(
            cel.all_of(
                cel.has(f"{POD_SPEC}.{f}"),
                cel.call(f"{POD_SPEC}.{f}", "startsWith", cel.lit(ACCOUNT_PREFIX)),
            ),
            f"[{POD_SPEC}.{f}]",
            "[]",
        )
        for f in ACCOUNT_FIELDS
    ]
    return cel.concat(*(cel.group(n) for n in named))


def render_identity_policy() -> dict[str, Any]:
    """Pods and pod templates may not name a person's cluster account."""
    return render_policy(
        NAME,
        {
            "matchConstraints": pod_rules(),
            "matchConditions": [pod_or_template_changed()],
            "variables": [pod_spec_variable(), variable("personAccounts", _person_accounts())],
            "validations": [
                deny_unless(
                    cel.is_empty("variables.personAccounts"),
                    message_expression=cel.message(
                        cel.concat("request.kind.kind", cel.lit(" "), "request.name"),
                        " runs as ServiceAccount ",
                        cel.call("variables.personAccounts", "join", cel.lit(", ")),
                        f", a person's cluster account (names starting with {ACCOUNT_PREFIX} "
                        "belong to the people of your organization and are for kubectl only): a "
                        "pod may not borrow someone's identity, which would outlive their "
                        "membership. Remove serviceAccountName to run as the namespace's default "
                        "account, or create your own ServiceAccount with another name and use "
                        "that.",
                    ),
                    reason="Forbidden",
                )
            ],
        },
    )
