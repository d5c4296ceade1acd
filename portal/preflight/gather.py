"""Gathering the facts the checks need from the cluster: quota, capacity, volumes, dry runs.

Reads use the platform's client; the dry runs act as the tenant (`kube.tenant_identity`), so RBAC,
the admission policies, Pod Security and quota answer exactly as they would for `kubectl apply`.
Every object is dry-run by server-side apply (works for new and existing objects alike) into the
project's namespace, whatever namespace the manifest names; one that client-side `kubectl apply`
applied last gets kubectl's own patch instead (`clientapply.py`), as `--dry-run=server` would.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict, defaultdict
from decimal import Decimal
from typing import Any
from urllib.parse import quote

from portal.preflight import clientapply
from portal.preflight.facts import AdmissionResult, CapacityFacts, ProductFacts, QuotaFacts
from portal.preflight.kube import ClusterUnavailableError, Identity, Response, request
from portal.preflight.manifest import ManifestError, describe, parse_quantity
from tranche.names import DRIVER

QUOTA_NAME = "tranche-quota"
FIELD_MANAGER = "tranche-preflight"

DISCOVERY_TTL_S = 300.0
MAX_GROUP_VERSIONS = 512  # the served group/versions of a cluster number ~30-60


class _Discovery:
    """What the API server serves, asked before any request is built from a tenant's
    `apiVersion` (it once became a request path sent with the portal's identity).

    Bounded: the served group/version list (`GET /api`, `GET /apis`) is refreshed every
    DISCOVERY_TTL_S; resources are cached only for group/versions in that list, at most
    MAX_GROUP_VERSIONS, oldest first out. A version the cluster does not serve costs no request.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.served: frozenset[str] = frozenset()
        self.served_at = -DISCOVERY_TTL_S
        self.resources: OrderedDict[str, tuple[float, dict[str, tuple[str, bool]]]] = OrderedDict()

    def _served(self, api: Any) -> frozenset[str]:
        if time.monotonic() - self.served_at < DISCOVERY_TTL_S:
            return self.served
        core = _read(api, "/api", "the API server's discovery") or {}
        groups = _read(api, "/apis", "the API server's discovery") or {}
        served = {str(v) for v in core.get("versions") or []}
        for group in groups.get("groups") or []:
            served |= {str(v.get("groupVersion")) for v in group.get("versions") or []}
        with self.lock:
            self.served, self.served_at = frozenset(served), time.monotonic()
        return self.served

    def resource_of(self, api: Any, api_version: str, kind: str) -> tuple[str, bool] | None:
        if api_version not in self._served(api):
            return None
        with self.lock:
            hit = self.resources.get(api_version)
        if hit is None or time.monotonic() - hit[0] > DISCOVERY_TTL_S:
            found = request(api, "GET", _group_path(api_version))
            if found.status != 200:
                return None
            kinds = {
                str(r["kind"]): (str(r["name"]), bool(r.get("namespaced")))
                for r in found.body.get("resources", [])
                if "/" not in r.get("name", "") and "kind" in r
            }
            hit = (time.monotonic(), kinds)
            with self.lock:
                self.resources[api_version] = hit
                self.resources.move_to_end(api_version)
                while len(self.resources) > MAX_GROUP_VERSIONS:
                    self.resources.popitem(last=False)
        return hit[1].get(kind)


DISCOVERY = _Discovery()


def _group_path(api_version: str) -> str:
    return "/api/v1" if api_version == "v1" else f"/apis/{api_version}"


def resource_of(api: Any, api_version: str, kind: str) -> tuple[str, bool] | None:
    """(plural, namespaced) of a kind the API server serves, else None (nothing requested)."""
    return DISCOVERY.resource_of(api, api_version, kind)


def dry_run(api: Any, namespace: str, obj: dict[str, Any], identity: Identity) -> AdmissionResult:
    subject = describe(obj)
    api_version, kind = str(obj["apiVersion"]), str(obj["kind"])
    resource = resource_of(api, api_version, kind)
    if resource is None:
        return AdmissionResult(
            subject, False, 404, "NotFound",
            f"The cluster has no kind {kind} in {api_version}: check apiVersion and kind.",
        )  # fmt: skip
    plural, namespaced = resource
    body = {**obj, "metadata": {**obj["metadata"]}}
    if namespaced:
        body["metadata"]["namespace"] = namespace
    path = (
        _group_path(api_version)
        + (f"/namespaces/{namespace}" if namespaced else "")
        + f"/{quote(plural, safe='')}/{quote(str(obj['metadata']['name']), safe=':@')}"
    )
    # As kubectl would: its client-side apply's patch for an object it applied so.
    resp = clientapply.dry_run_as_kubectl(api, path, body, identity)
    if resp is None:
        query = [("dryRun", "All"), ("fieldManager", FIELD_MANAGER), ("force", "true")]
        resp = request(
            api, "PATCH", path, query=query, body=json.dumps(body, default=str),
            identity=identity, content_type="application/apply-patch+yaml",
        )  # fmt: skip
    if resp.status < 400:
        return AdmissionResult(subject, True, resp.status, warnings=resp.warnings)
    return AdmissionResult(
        subject, False, resp.status, str(resp.body.get("reason", "")),
        str(resp.body.get("message", "")), resp.warnings,
    )  # fmt: skip


def _read(api: Any, path: str, what: str, missing_ok: bool = False) -> dict[str, Any] | None:
    """A read the checks depend on: a refusal must not pass for "nothing there"."""
    resp = request(api, "GET", path)
    if resp.status == 404 and missing_ok:
        return None
    if resp.status != 200:
        raise ClusterUnavailableError(
            f"the portal could not read {what} (HTTP {resp.status}: {resp.body.get('reason', '')})"
        )
    return resp.body


def quota_facts(api: Any, namespace: str) -> QuotaFacts | None:
    path = f"/api/v1/namespaces/{namespace}/resourcequotas/{QUOTA_NAME}"
    body = _read(api, path, "the project's quota", missing_ok=True)
    if body is None:
        return None
    resp = Response(200, body, ())
    status = resp.body.get("status") or {}
    hard = status.get("hard") or (resp.body.get("spec") or {}).get("hard") or {}
    return QuotaFacts(QUOTA_NAME, dict(hard), dict(status.get("used") or {}))


def volume_claims(api: Any, namespace: str) -> dict[str, str]:
    path = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims"
    resp = Response(200, _read(api, path, "the project's volume claims") or {}, ())
    return {
        item["metadata"]["name"]: (item.get("status") or {}).get("phase", "")
        for item in resp.body.get("items", [])
    }


def _quantity(value: Any) -> Decimal:
    try:
        return parse_quantity(value)
    except ManifestError:
        return Decimal(0)


def capacity_facts(api: Any, products: dict[str, ProductFacts]) -> CapacityFacts:
    """Free slices per product: each shareable GPU of its model, minus what claims consume."""
    base = "/apis/resource.k8s.io/v1"
    slices = (_read(api, f"{base}/resourceslices", "the GPUs' ResourceSlices") or {}).get(
        "items", []
    )
    claims = (_read(api, f"{base}/resourceclaims", "allocated ResourceClaims") or {}).get(
        "items", []
    )
    used: dict[tuple[str, str], dict[str, Decimal]] = defaultdict(
        lambda: {"memory": Decimal(0), "cores": Decimal(0)}
    )
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            if result.get("driver") != DRIVER:
                continue
            key = (str(result.get("pool")), str(result.get("device")))
            for name, value in (result.get("consumedCapacity") or {}).items():
                if name in used[key]:
                    used[key][name] += _quantity(value)
    gpus: dict[str, int] = defaultdict(int)
    free: dict[str, int] = defaultdict(int)
    for item in slices:
        spec = item.get("spec") or {}
        if spec.get("driver") != DRIVER:
            continue
        pool = str((spec.get("pool") or {}).get("name"))
        for device in spec.get("devices") or []:
            model = ((device.get("attributes") or {}).get("productName") or {}).get("string")
            if not device.get("allowMultipleAllocations"):
                continue
            capacity = device.get("capacity") or {}
            memory = _quantity((capacity.get("memory") or {}).get("value", 0))
            cores = _quantity((capacity.get("cores") or {}).get("value", 100))
            taken = used[(pool, str(device.get("name")))]
            for product in products.values():
                if product.gpu_name != model:
                    continue
                gpus[product.device_class] += 1
                by_memory = (memory - taken["memory"]) // (product.memory_mib * 2**20)
                by_cores = (cores - taken["cores"]) // product.compute_percent
                free[product.device_class] += max(0, int(min(by_memory, by_cores)))
    return CapacityFacts(dict(gpus), dict(free))
