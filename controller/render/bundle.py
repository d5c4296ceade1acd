"""All objects of one project, and the platform-wide ones, in the order they must be applied.

Order matters: the namespace first; the entitlements ConfigMap before templates (the claim
policy reads it to admit them); policies before their bindings.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from controller.render.access import render_access, render_access_cluster_roles
from controller.render.claim_template import render_claim_templates, render_entitlements
from controller.render.device_class import render_device_class
from controller.render.limit_range import render_limit_range
from controller.render.namespace import render_namespace
from controller.render.network_policy import render_network_policy
from controller.render.policies import render_access_policy, render_policies
from controller.render.quota import render_resource_quota
from controller.render.rbac import render_role_binding, render_tenant_cluster_role
from controller.render.spec import ProjectSpec
from tranche.products import ProductSpec


def render_project(spec: ProjectSpec) -> list[dict[str, Any]]:
    """Desired objects of one project namespace (namespace first)."""
    return [
        render_namespace(spec),
        render_entitlements(spec),
        render_resource_quota(spec),
        render_limit_range(spec),
        render_role_binding(spec),
        render_network_policy(spec),
        *render_claim_templates(spec),
        *render_access(spec),
    ]


def render_platform(
    products: Iterable[ProductSpec],
    platform_users: tuple[str, ...] = (),
    node_ports_allowed: bool = False,
) -> list[dict[str, Any]]:
    """Cluster-scoped objects: one DeviceClass per product, the tenant ClusterRoles, then the
    policies and bindings (`node_ports_allowed`: tenants may make NodePort/LoadBalancer
    Services)."""
    classes = [render_device_class(p) for p in sorted(products, key=lambda p: p.device_class)]
    roles = [render_tenant_cluster_role(), *render_access_cluster_roles()]
    policies = [
        *render_policies(platform_users, node_ports_allowed),
        *render_access_policy(platform_users),
    ]
    return [*classes, *roles, *policies]
