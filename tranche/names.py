"""Names Tranche gives things in Kubernetes: the label domain, the DRA driver, DeviceClasses,
labels and annotations, and the names of the objects the controller manages per project."""

from __future__ import annotations

DOMAIN = "tranche.dev"
DRIVER = f"gpu.{DOMAIN}"
LABEL_DOMAIN = DOMAIN

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "tranche"
LABEL_ORGANIZATION = f"{DOMAIN}/organization"
LABEL_PROJECT = f"{DOMAIN}/project"
LABEL_TENANT = f"{DOMAIN}/tenant"
LABEL_COMPONENT = f"{DOMAIN}/component"
ANNOTATION_SPEC_HASH = f"{DOMAIN}/spec-hash"

# node agent: ResourceSlices it publishes, CDI devices it names, node labels of fake GPU nodes
LABEL_SLICE_MANAGED_BY = f"{DOMAIN}/managed-by"
SLICE_MANAGER = "tranche-nodeagent"
ANNOTATION_DEVICES_DIGEST = f"{DOMAIN}/devices-digest"
CDI_VENDOR = DOMAIN
# DRA device taints on a GPU (docs/nodeagent.md "GPU health"): the agent's own, NoExecute, when
# the GPU failed (value: "xid-79", "gpu-lost", "ecc-double-bit"); support's, NoSchedule, while
# a GPU is out for maintenance (a DeviceTaintRule the controller applies).
TAINT_GPU_UNHEALTHY = f"{DOMAIN}/gpu-unhealthy"
TAINT_GPU_MAINTENANCE = f"{DOMAIN}/gpu-maintenance"
# Simulated (kwok) GPU nodes: how many GPUs and which model a node carries, and the fleet it
# belongs to (`python -m nodeagent fleet` publishes for every node of one fleet). The model is
# an annotation because label values cannot hold "Tesla V100-PCIE-32GB" as NVML names it.
LABEL_GPU_COUNT = f"{DOMAIN}/gpu-count"
LABEL_FLEET = f"{DOMAIN}/fleet"
ANNOTATION_SIM_GPU_MODEL = f"{DOMAIN}/sim-gpu-model"
# The claim a CDI spec was written for (nodeagent.cdi); the model a tenant's pod serves and its
# size, which pre-flight's lints read (docs/preflight.md).
ANNOTATION_CLAIM_UID = f"{DOMAIN}/claim-uid"
ANNOTATION_MODEL = f"{DOMAIN}/model"
ANNOTATION_MODEL_SIZE = f"{DOMAIN}/model-size"

CLAIM_REQUEST_NAME = "gpu"
ENTITLEMENTS_CONFIGMAP = "tranche-entitlements"
TENANT_ROLE = "tranche-tenant"
# Cluster access (docs/cluster-access.md): read-only rights, and what a suspended organization's
# members keep (read plus delete); the portal's right to mint tokens in project namespaces.
TENANT_VIEW_ROLE = "tranche-tenant-view"
TENANT_SUSPENDED_ROLE = "tranche-tenant-suspended"
PORTAL_TOKENS_ROLE = "tranche-portal-tokens"
PORTAL_SERVICE_ACCOUNT = ("tranche-system", "tranche-portal")
ANNOTATION_PORTAL_USER = f"{DOMAIN}/portal-user"
# People's cluster accounts (`u-<username>-<id>-<generation>`, tranche.naming): reserved
# names in project namespaces, which admission keeps out of pods and tenants' own accounts.
ACCOUNT_PREFIX = "u-"
# A member's role in an organization (portal.tenants.Membership.Role): owners and members edit
# the project namespaces, viewers only read.
ROLE_OWNER, ROLE_MEMBER, ROLE_VIEWER = "owner", "member", "viewer"
QUOTA_NAME = "tranche-quota"
LIMIT_RANGE_NAME = "tranche-defaults"
# The controller's identity when installed with deploy/install (a platform user in policies).
CONTROLLER_SERVICE_ACCOUNT = "system:serviceaccount:tranche-system:tranche-controller"


def device_class_name(gpu_short_name: str, memory_gib: int) -> str:
    """The DeviceClass (and claim template) name of a slice product: `tranche-v100-8g`."""
    return f"tranche-{gpu_short_name}-{memory_gib}g"


def tenant_group(namespace: str) -> str:
    """The group a tenant's identity carries to act in a project's namespace."""
    return f"{DOMAIN}:tenant:{namespace}"


# The sample tenant image (deploy/images/sample.py builds it; the dev cluster's real nodes
# import it): the manifest page's slice check runs it.
SAMPLE_IMAGE = f"registry.{DOMAIN}/sample:1"
