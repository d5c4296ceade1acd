"""ValidatingAdmissionPolicies (and bindings) guarding tenant namespaces, one module per policy.

Nine policies, each bound to namespaces labelled `tranche.dev/tenant: "true"`:
1. `gpu`: no nvidia.com/gpu-style extended resources in any container;
2. `claim_form`: ResourceClaims/Templates only in the documented form, for a class sold to the
   project (read from the namespace's `tranche-entitlements` ConfigMap, the parameter);
3. `pod_hardening`: no environment that steers the runtime's GPU hooks or the loader (in env or
   envFrom), no volume over the slice's files, no hostPath, privileged containers or added
   capabilities;
4. `managed_objects`: tenants cannot change or delete what Tranche manages;
5. `tenant_accounts`: people's cluster accounts and their tokens stay what the portal made them;
6. `identities`: no pod or pod template runs as a person's cluster account (`u-...`);
7. `services`: no Service `externalIPs`; NodePort and LoadBalancer only where the product allows;
   no ExternalName;
8. `seccomp`: no seccomp profile but RuntimeDefault (no Unconfined, no Localhost), pod or container;
9. `pod_security`: workloads whose pod template Pod Security `baseline` would refuse, in its words.
1, 3, 6, 8 and 9 judge pods and the pod templates of workloads alike (`pods`); docs/admission.md
says why.
Expressions are built with `cel`; messages say what happened, why, and what to do. CEL runs on
the API server, not here.
"""

from __future__ import annotations

from typing import Any

from controller.render.policies import claim_form
from controller.render.policies.claim_form import render_claim_policy
from controller.render.policies.gpu import render_gpu_policy
from controller.render.policies.identities import render_identity_policy
from controller.render.policies.managed_objects import render_managed_policy
from controller.render.policies.objects import render_binding
from controller.render.policies.pod_hardening import render_pod_policy
from controller.render.policies.pod_security import render_pod_security_policy
from controller.render.policies.seccomp import render_seccomp_policy
from controller.render.policies.services import render_service_policy
from controller.render.policies.tenant_accounts import render_access_policy
from tranche.names import ENTITLEMENTS_CONFIGMAP

__all__ = [
    "render_access_policy",
    "render_claim_policy",
    "render_gpu_policy",
    "render_identity_policy",
    "render_managed_policy",
    "render_pod_policy",
    "render_pod_security_policy",
    "render_policies",
    "render_seccomp_policy",
    "render_service_policy",
]


def render_policies(
    platform_users: tuple[str, ...] = (), node_ports_allowed: bool = False
) -> list[dict[str, Any]]:
    """Policies 1-4 and 6-9 followed by their bindings (policies first: bindings refer to
    them); `render_access_policy` renders policy 5 with its binding."""
    policies = [
        render_gpu_policy(),
        render_claim_policy(),
        render_pod_policy(),
        render_managed_policy(platform_users),
        render_identity_policy(),
        render_service_policy(node_ports_allowed, platform_users),
        render_seccomp_policy(),
        render_pod_security_policy(),
    ]
    bindings = [
        render_binding(
            claim_form.NAME, {"name": ENTITLEMENTS_CONFIGMAP, "parameterNotFoundAction": "Deny"}
        )
        if p["metadata"]["name"] == claim_form.NAME
        else render_binding(p["metadata"]["name"])
        for p in policies
    ]
    return policies + bindings
