"""ValidatingAdmissionPolicies (and bindings) guarding tenant namespaces.

Four policies, each bound to namespaces labelled `tranche.dev/tenant: "true"`:
1. `tranche-no-device-plugin-gpus`: no nvidia.com/gpu-style extended resources in any container;
2. `tranche-claim-form`: ResourceClaims/Templates only in the documented form, for a class sold
   to the project (read from the namespace's `tranche-entitlements` ConfigMap, the parameter);
3. `tranche-pod-hardening`: no LD_PRELOAD/CUDA_*/TRANCHE_*/NVIDIA_VISIBLE_DEVICES, hostPath,
   privileged containers or added capabilities;
4. `tranche-managed-objects`: tenants cannot change or delete what Tranche manages.
Messages say what happened, why, and what to do. CEL runs on the API server, not here.
"""

from __future__ import annotations

from typing import Any

from controller.render.spec import (
    CLAIM_REQUEST_NAME,
    CONTROLLER_SERVICE_ACCOUNT,
    ENTITLEMENTS_CONFIGMAP,
    LABEL_MANAGED_BY,
    LABEL_ORGANIZATION,
    LABEL_PROJECT,
    LABEL_TENANT,
    MANAGED_BY,
    platform_labels,
)

# Identities that act for the platform and are never judged as tenants by policy 4.
PLATFORM_GROUPS = ("system:masters", "system:nodes")
PLATFORM_USER_PREFIXES = ("system:serviceaccount:kube-system:", "system:kube-")

_ALL_CONTAINERS = (
    "object.spec.containers"
    " + (has(object.spec.initContainers) ? object.spec.initContainers : [])"
    " + (has(object.spec.ephemeralContainers) ? object.spec.ephemeralContainers : [])"
)
_GPU_PREFIXES = ("nvidia.com/", "amd.com/", "gpu.intel.com/", "habana.ai/")
_FORBIDDEN_ENV = "e.name in ['LD_PRELOAD', 'NVIDIA_VISIBLE_DEVICES'] || e.name.startsWith('CUDA_')"
_FORBIDDEN_ENV += " || e.name.startsWith('TRANCHE_')"
_DOC_HINT = "Use the documented ResourceClaimTemplate shown on the manifest page of your project."


def _is_gpu(var: str) -> str:
    return " || ".join(f"{var}.startsWith('{p}')" for p in _GPU_PREFIXES)


def _same_quantity(a: str, b: str) -> str:
    # the CEL quantity library has no equality; neither greater nor less means equal
    qa, qb = f"quantity(string({a}))", f"quantity({b})"
    return f"!{qa}.isGreaterThan({qb}) && !{qa}.isLessThan({qb})"


def _names(filter_expr: str) -> str:
    return f"variables.containers.filter(c, {filter_expr}).map(c, c.name)"


def _policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": platform_labels()},
        "spec": {"failurePolicy": "Fail", **spec},
    }


def _binding(policy: str, param_ref: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "policyName": policy,
        "validationActions": ["Deny"],
        "matchResources": {"namespaceSelector": {"matchLabels": {LABEL_TENANT: "true"}}},
    }
    if param_ref:
        spec["paramRef"] = param_ref
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy, "labels": platform_labels()},
        "spec": spec,
    }


def _pod_rules() -> dict[str, Any]:
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


def render_gpu_policy() -> dict[str, Any]:
    """Policy 1: device-plugin GPU resources are refused in every kind of container."""
    asks_gpu = (
        "has(c.resources) && ("
        f"(has(c.resources.limits) && c.resources.limits.exists(k, {_is_gpu('k')})) || "
        f"(has(c.resources.requests) && c.resources.requests.exists(k, {_is_gpu('k')})))"
    )
    return _policy(
        "tranche-no-device-plugin-gpus",
        {
            "matchConstraints": _pod_rules(),
            "variables": [
                {"name": "containers", "expression": _ALL_CONTAINERS},
                {"name": "gpuContainers", "expression": _names(asks_gpu)},
            ],
            "validations": [
                {
                    "expression": "size(variables.gpuContainers) == 0",
                    "messageExpression": (
                        "'Container(s) ' + variables.gpuContainers.join(', ') + ' request a "
                        "whole GPU through a device-plugin resource such as nvidia.com/gpu, which "
                        "Tranche "
                        "does not offer: shared GPU slices are only available through resource "
                        "claims. Remove the nvidia.com/gpu request and add resourceClaims: [{name: "
                        f"{CLAIM_REQUEST_NAME}, resourceClaimTemplateName: <your product class, "
                        "e.g. tranche-v100-8g>}] as shown on the manifest page of your project.'"
                    ),
                    "reason": "Forbidden",
                }
            ],
        },
    )


def render_claim_policy() -> dict[str, Any]:
    """Policy 2: claims and templates must be the documented form of a class sold here."""
    exactly = "variables.exactly"
    cls = "variables.cls"
    mem_key = f"({cls} + '.memory')"
    cores_key = f"({cls} + '.cores')"
    reqs = f"{exactly}.capacity.requests"
    capacity_ok = (
        f"has({exactly}.capacity) && has({reqs}) && size({reqs}) == 2 && "
        f"'memory' in {reqs} && 'cores' in {reqs} && variables.sold && "
        + _same_quantity(reqs + "['memory']", f"params.data[{mem_key}]")
        + " && "
        + _same_quantity(reqs + "['cores']", f"params.data[{cores_key}]")
    )
    sold_classes = (
        "(has(params.data) ? params.data.map(k, k).filter(k, k.endsWith('.memory'))"
        ".map(k, k.replace('.memory', '')) : [])"
    )
    labels = "(has(object.metadata.labels) ? object.metadata.labels : {})"
    ns_labels = "(has(namespaceObject.metadata.labels) ? namespaceObject.metadata.labels : {})"
    template_form = (
        "request.resource.resource != 'resourceclaimtemplates' || ("
        f"object.metadata.name == {cls} && "
        f"'{LABEL_MANAGED_BY}' in {labels} && {labels}['{LABEL_MANAGED_BY}'] == '{MANAGED_BY}' && "
        f"'{LABEL_PROJECT}' in {labels} && '{LABEL_PROJECT}' in {ns_labels} && "
        f"{labels}['{LABEL_PROJECT}'] == {ns_labels}['{LABEL_PROJECT}'] && "
        f"'{LABEL_ORGANIZATION}' in {labels} && '{LABEL_ORGANIZATION}' in {ns_labels} && "
        f"{labels}['{LABEL_ORGANIZATION}'] == {ns_labels}['{LABEL_ORGANIZATION}'])"
    )
    what = "(request.resource.resource == 'resourceclaims' ? 'ResourceClaim ' : 'ResourceClaimTemplate ') + object.metadata.name"  # noqa: E501
    return _policy(
        "tranche-claim-form",
        {
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["resource.k8s.io"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["resourceclaims", "resourceclaimtemplates"],
                    }
                ]
            },
            # Claims are immutable once created; their later updates (finalizers) are the
            # controller-manager's and must pass even after a cancel removed the class.
            "matchConditions": [
                {
                    "name": "create-or-template",
                    "expression": "request.operation == 'CREATE' || "
                    "request.resource.resource == 'resourceclaimtemplates'",
                }
            ],
            "variables": [
                {
                    "name": "spec",
                    "expression": "request.resource.resource == 'resourceclaims' "
                    "? object.spec : object.spec.spec",
                },
                {
                    "name": "devices",
                    "expression": "has(variables.spec.devices) ? variables.spec.devices : {}",
                },
                {
                    "name": "requests",
                    "expression": "has(variables.devices.requests) "
                    "? variables.devices.requests : []",
                },
                {
                    "name": "exactly",
                    "expression": "size(variables.requests) == 1 && "
                    "has(variables.requests[0].exactly) ? variables.requests[0].exactly : {}",
                },
                {
                    "name": "cls",
                    "expression": f"has({exactly}.deviceClassName) "
                    f"? {exactly}.deviceClassName : ''",
                },
                {
                    "name": "sold",
                    "expression": f"has(params.data) && {mem_key} in params.data && "
                    f"{cores_key} in params.data",
                },
            ],
            "validations": [
                {
                    "expression": "size(variables.requests) == 1 && "
                    f"variables.requests[0].name == '{CLAIM_REQUEST_NAME}' && "
                    "has(variables.requests[0].exactly)",
                    "messageExpression": f"{what} + ' must have exactly one device request, "
                    f'named "{CLAIM_REQUEST_NAME}", using `exactly` (no firstAvailable). '
                    f"{_DOC_HINT}'",
                    "reason": "Invalid",
                },
                {
                    "expression": "variables.sold",
                    "messageExpression": f"{what} + ' asks for DeviceClass \"' + {cls} + '\", "
                    "which is not sold to this project. Classes you can use here: ' + "
                    f"({sold_classes}.size() > 0 ? {sold_classes}.join(', ') : 'none') + "
                    "'. Buy the product in the portal first, then use its documented template.'",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"(!has({exactly}.allocationMode) || "
                    f"{exactly}.allocationMode == 'ExactCount') && "
                    f"(!has({exactly}.count) || {exactly}.count == 1)",
                    "messageExpression": f"{what} + ' must ask for count: 1 (one slice per "
                    "request). To use more slices, add more claims; your quota limits how many "
                    f"you hold. {_DOC_HINT}'",
                    "reason": "Invalid",
                },
                {
                    "expression": f"!variables.sold || ({capacity_ok})",
                    "messageExpression": f"{what} + ' must request exactly the capacity of a ' "
                    f"+ {cls} + ' slice (memory: ' + (variables.sold ? params.data[{mem_key}] : "
                    f"'?') + ', cores: ' + (variables.sold ? params.data[{cores_key}] : '?') + "
                    "'): slice sizes are fixed by the product, not chosen per claim. "
                    f"{_DOC_HINT}'",
                    "reason": "Invalid",
                },
                {
                    "expression": f"(!has({exactly}.selectors) || size({exactly}.selectors) == 0)"
                    f" && (!has({exactly}.tolerations) || size({exactly}.tolerations) == 0) && "
                    "(!has(variables.devices.constraints) || "
                    "size(variables.devices.constraints) == 0) && "
                    "(!has(variables.devices.config) || size(variables.devices.config) == 0)",
                    "messageExpression": f"{what} + ' sets selectors, tolerations, constraints "
                    "or config: a Tranche slice is chosen by its DeviceClass alone, so these "
                    f"fields are not allowed. Remove them. {_DOC_HINT}'",
                    "reason": "Invalid",
                },
                {
                    "expression": f"!has({exactly}.adminAccess) || !{exactly}.adminAccess",
                    "messageExpression": f"{what} + ' sets adminAccess, which gives access to "
                    "devices in use by others and is reserved to the platform. Remove it.'",
                    "reason": "Forbidden",
                },
                {
                    "expression": template_form,
                    "messageExpression": f"{what} + ' must be named like its DeviceClass (' + "
                    f"{cls} + ') and carry the labels {LABEL_MANAGED_BY}={MANAGED_BY}, "
                    f"{LABEL_ORGANIZATION} and {LABEL_PROJECT} of this namespace. {_DOC_HINT}'",
                    "reason": "Invalid",
                },
            ],
        },
    )


def render_pod_policy() -> dict[str, Any]:
    """Policy 3: pods cannot bypass the slice's interception or reach the host."""
    env_bad = f"has(c.env) && c.env.exists(e, {_FORBIDDEN_ENV})"
    privileged = (
        "has(c.securityContext) && has(c.securityContext.privileged) "
        "&& c.securityContext.privileged"
    )
    caps = (
        "has(c.securityContext) && has(c.securityContext.capabilities) && "
        "has(c.securityContext.capabilities.add) && size(c.securityContext.capabilities.add) > 0"
    )
    return _policy(
        "tranche-pod-hardening",
        {
            "matchConstraints": _pod_rules(),
            "variables": [
                {"name": "containers", "expression": _ALL_CONTAINERS},
                {"name": "envContainers", "expression": _names(env_bad)},
                {"name": "privileged", "expression": _names(privileged)},
                {"name": "capContainers", "expression": _names(caps)},
            ],
            "validations": [
                {
                    "expression": "size(variables.envContainers) == 0",
                    "messageExpression": "'Container(s) ' + variables.envContainers.join(', ') + "
                    "' set LD_PRELOAD, NVIDIA_VISIBLE_DEVICES or a CUDA_*/TRANCHE_* variable. "
                    "These control which GPU and which slice limits a process gets, so Tranche "
                    "sets them itself. Remove them from env.'",
                    "reason": "Forbidden",
                },
                {
                    "expression": "!has(object.spec.volumes) || "
                    "!object.spec.volumes.exists(v, has(v.hostPath))",
                    "message": "hostPath volumes are not allowed in Tranche projects: they expose "
                    "the node's files, including other tenants' GPU state. Use a "
                    "PersistentVolumeClaim or an emptyDir instead.",
                    "reason": "Forbidden",
                },
                {
                    "expression": "size(variables.privileged) == 0",
                    "messageExpression": "'Container(s) ' + variables.privileged.join(', ') + "
                    "' run privileged, which would give them every GPU and the host. Remove "
                    "securityContext.privileged.'",
                    "reason": "Forbidden",
                },
                {
                    "expression": "size(variables.capContainers) == 0",
                    "messageExpression": "'Container(s) ' + variables.capContainers.join(', ') + "
                    "' add Linux capabilities. Tranche projects run with the default set; remove "
                    "securityContext.capabilities.add.'",
                    "reason": "Forbidden",
                },
            ],
        },
    )


def render_managed_policy(platform_users: tuple[str, ...] = ()) -> dict[str, Any]:
    """Policy 4: tenants cannot delete, edit or impersonate objects Tranche manages.

    Updates that leave labels and content alone (e.g. `kubectl apply` of the documented
    template, which only touches annotations) are allowed.
    """
    groups = "(has(request.userInfo.groups) ? request.userInfo.groups : [])"
    platform = " || ".join(
        [
            f"{groups}.exists(g, g in {list(PLATFORM_GROUPS)})",
            *[f"request.userInfo.username.startsWith('{p}')" for p in PLATFORM_USER_PREFIXES],
            f"request.userInfo.username in {[CONTROLLER_SERVICE_ACCOUNT, *platform_users]}",
        ]
    )

    def managed(obj: str) -> str:
        return (
            f"({obj} != null && has({obj}.metadata.labels) && "
            f"'{LABEL_MANAGED_BY}' in {obj}.metadata.labels && "
            f"{obj}.metadata.labels['{LABEL_MANAGED_BY}'] == '{MANAGED_BY}')"
        )

    def same(field: str) -> str:
        return (
            f"(has(object.{field}) == has(oldObject.{field}) && "
            f"(!has(object.{field}) || object.{field} == oldObject.{field}))"
        )

    unchanged = " && ".join(same(f) for f in ("metadata.labels", "spec", "data", "rules"))
    unchanged += " && " + " && ".join(same(f) for f in ("subjects", "roleRef"))
    what = "request.kind.kind + ' ' + request.name"
    return _policy(
        "tranche-managed-objects",
        {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE", "DELETE"],
                        "resources": ["configmaps", "resourcequotas", "limitranges"],
                    },
                    {
                        "apiGroups": ["rbac.authorization.k8s.io"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE", "DELETE"],
                        "resources": ["roles", "rolebindings"],
                    },
                    {
                        "apiGroups": ["resource.k8s.io"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE", "DELETE"],
                        "resources": ["resourceclaimtemplates"],
                    },
                ]
            },
            "matchConditions": [
                {"name": "not-the-platform", "expression": f"!({platform})"},
                {
                    "name": "managed-by-tranche",
                    "expression": f"{managed('object')} || {managed('oldObject')}",
                },
            ],
            "validations": [
                {
                    "expression": "request.operation != 'DELETE'",
                    "messageExpression": f"{what} + ' is managed by Tranche from what your "
                    "organization bought, so it cannot be deleted by hand. Change your order in "
                    "the portal instead.'",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"request.operation != 'UPDATE' || ({unchanged})",
                    "messageExpression": f"{what} + ' is managed by Tranche from what your "
                    "organization bought, so it cannot be edited by hand (any change would be "
                    "reverted). Change your order in the portal instead.'",
                    "reason": "Forbidden",
                },
                {
                    "expression": "request.operation != 'CREATE' || "
                    "request.resource.resource == 'resourceclaimtemplates'",
                    "messageExpression": f"{what} + ' carries the label {LABEL_MANAGED_BY}="
                    f"{MANAGED_BY}, which only Tranche may set. Remove that label.'",
                    "reason": "Forbidden",
                },
            ],
        },
    )


def render_policies(platform_users: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """All four policies followed by their bindings (policies first: bindings refer to them)."""
    policies = [
        render_gpu_policy(),
        render_claim_policy(),
        render_pod_policy(),
        render_managed_policy(platform_users),
    ]
    bindings = [
        _binding(p["metadata"]["name"])
        if p["metadata"]["name"] != "tranche-claim-form"
        else _binding(
            "tranche-claim-form",
            {"name": ENTITLEMENTS_CONFIGMAP, "parameterNotFoundAction": "Deny"},
        )
        for p in policies
    ]
    return policies + bindings
