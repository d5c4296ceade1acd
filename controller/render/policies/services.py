"""Policy `tranche-service-exposure`: tenants' Services stay inside the cluster.

- `spec.externalIPs` is refused always: a Service claiming an external IP makes every node's
  kube-proxy capture traffic to that IP, whoever it was meant for (CVE-2020-8554), so one tenant
  could intercept another's or the platform's connections;
- `type: NodePort` and `type: LoadBalancer` (which opens node ports too) are refused unless the
  product allows them (`TRANCHE_ALLOW_NODE_PORT_SERVICES`, off by default): they open a port on
  every node, outside the project's network policy. Tenants reach their pods with
  `kubectl port-forward`, or through the platform's ingress.
- `type: ExternalName` is refused unless the product offers it (`external_names_allowed`, off;
  no product offers it today): the cluster's DNS would answer a name in the tenant's namespace
  with any host the tenant names (the platform's own services included), which the platform's
  ingress and other tenants' clients may follow.

The platform (controllers removing a load balancer's finalizer, an admin) is not judged. A Service
made before this rule is judged again when a tenant updates it.
"""

from __future__ import annotations

from typing import Any

from controller.render.policies import cel
from controller.render.policies.objects import REQUESTED_OBJECT, deny_unless, render_policy
from controller.render.policies.ownership import not_the_platform

NAME = "tranche-service-exposure"
EXPOSED_TYPES = ("NodePort", "LoadBalancer")


def render_service_policy(
    node_ports_allowed: bool = False,
    platform_users: tuple[str, ...] = (),
    external_names_allowed: bool = False,
) -> dict[str, Any]:
    """externalIPs refused; NodePort/LoadBalancer refused unless `node_ports_allowed`;
    ExternalName refused unless `external_names_allowed`."""
    validations = [
        deny_unless(
            cel.absent_or_empty("object.spec.externalIPs"),
            message_expression=cel.message(
                REQUESTED_OBJECT,
                " sets spec.externalIPs, which would let it capture traffic meant for those "
                "addresses from every pod and node of the cluster, so Tranche refuses it. Remove "
                "externalIPs; reach the Service from inside the cluster, or with kubectl "
                "port-forward.",
            ),
            reason="Forbidden",
        )
    ]
    if not node_ports_allowed:
        validations.append(
            deny_unless(
                cel.any_of(
                    cel.not_(cel.has("object.spec.type")),
                    cel.not_(cel.group(cel.in_("object.spec.type", cel.str_list(EXPOSED_TYPES)))),
                ),
                message_expression=cel.message(
                    REQUESTED_OBJECT,
                    " is of type ",
                    cel.Expr("object.spec.type"),
                    ", which opens a port on every node of the cluster; this platform does not "
                    "offer that. Use type ClusterIP (the default) and reach it with kubectl "
                    "port-forward, or ask your provider about exposing services.",
                ),
                reason="Forbidden",
            )
        )
    if not external_names_allowed:
        validations.append(
            deny_unless(
                cel.any_of(
                    cel.not_(cel.has("object.spec.type")),
                    cel.ne("object.spec.type", cel.lit("ExternalName")),
                ),
                message_expression=cel.message(
                    REQUESTED_OBJECT,
                    " is of type ExternalName, which makes the cluster's DNS answer for it with "
                    "a host outside the namespace; this platform does not offer that. Use a "
                    "Service with a selector (type ClusterIP), or call the outside host by its "
                    "own name.",
                ),
                reason="Forbidden",
            )
        )
    return render_policy(
        NAME,
        {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["services"],
                    }
                ]
            },
            "matchConditions": [not_the_platform(platform_users)],
            "validations": validations,
        },
    )
