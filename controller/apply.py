"""The only module that talks to the Kubernetes API: compare, server-side apply, prune, count.

`Applier.sync()` is idempotent: it reads the live managed objects (one LIST per kind, selected by
the `managed-by: tranche` label), applies only objects whose content differs from the desired
one (a subset comparison plus a hash annotation of the desired body), and deletes labelled
objects no longer desired. A no-op sync therefore issues reads only; every write is counted.
Transient failures (connection errors, 429, 5xx, a terminating namespace) raise
`TransientApiError` for the caller to retry; anything else raises `ApplyError` with the API's
reason and message. The controller never adopts an object it did not make (`_remove_foreign`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tranche.names import ANNOTATION_SPEC_HASH, LABEL_MANAGED_BY, MANAGED_BY

log = logging.getLogger(__name__)
FIELD_MANAGER = "tranche-controller"
MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
TIMEOUT = (3, 20)  # connect, read seconds: a stopped API server must fail fast, not hang a worker
TRANSIENT_STATUS = {0, 408, 409, 429, 500, 502, 503, 504}

# (apiVersion, kind) -> (path prefix, plural, namespaced)
KINDS: dict[tuple[str, str], tuple[str, str, bool]] = {
    ("v1", "Namespace"): ("/api/v1", "namespaces", False),
    ("v1", "ConfigMap"): ("/api/v1", "configmaps", True),
    ("v1", "ResourceQuota"): ("/api/v1", "resourcequotas", True),
    ("v1", "LimitRange"): ("/api/v1", "limitranges", True),
    ("v1", "ServiceAccount"): ("/api/v1", "serviceaccounts", True),
    # Role: only tranche-portal-impersonate (it names the project's accounts); older ones pruned.
    ("rbac.authorization.k8s.io/v1", "Role"): ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): (
        "/apis/rbac.authorization.k8s.io/v1",
        "clusterroles",
        False,
    ),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): (
        "/apis/rbac.authorization.k8s.io/v1",
        "rolebindings",
        True,
    ),
    ("networking.k8s.io/v1", "NetworkPolicy"): (
        "/apis/networking.k8s.io/v1",
        "networkpolicies",
        True,
    ),
    ("resource.k8s.io/v1", "ResourceClaimTemplate"): (
        "/apis/resource.k8s.io/v1",
        "resourceclaimtemplates",
        True,
    ),
    ("resource.k8s.io/v1", "DeviceClass"): ("/apis/resource.k8s.io/v1", "deviceclasses", False),
    # GPUs out for maintenance (controller/gpu_maintenance.py), not part of the platform sync
    ("resource.k8s.io/v1", "DeviceTaintRule"): (
        "/apis/resource.k8s.io/v1",
        "devicetaintrules",
        False,
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicies",
        False,
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicybindings",
        False,
    ),
}
NAMESPACED_MANAGED = [k for k, (_, _, ns) in KINDS.items() if ns]
# Kinds with fields the API server never lets change, and the word its refusal names: such an
# object is deleted and created again (a changed product's template, an older binding's roleRef).
RECREATE_ON = {"ResourceClaimTemplate": "immutable", "RoleBinding": "roleRef"}
PLATFORM_KINDS = [
    k for k, (_, _, ns) in KINDS.items() if not ns and k[1] not in ("Namespace", "DeviceTaintRule")
]

# Process-wide totals (all Appliers), for benchmarks and the no-op resync check: calls by verb,
# and LISTs by resource (plural name: "configmaps"), so a list per project shows as growth.
CALLS: Counter[str] = Counter()
LISTS: Counter[str] = Counter()


_COUNT_LOCK = threading.Lock()


class TransientApiError(Exception):
    """The API server could not be reached or asked us to come back later; retry."""


class ApplyError(Exception):
    """The API server refused an object for good (invalid, forbidden); retrying will not help."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


def spec_hash(obj: dict[str, Any]) -> str:
    """Stable hash of a desired body (without the hash annotation itself)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def is_subset(want: Any, live: Any) -> bool:
    """True if every field of `want` is in `live` with an equal value (lists: same length)."""
    if isinstance(want, dict):
        return isinstance(live, dict) and all(
            is_subset(v, live[k]) if k in live else v in ({}, [])  # the server drops empties
            for k, v in want.items()
        )
    if isinstance(want, list):
        return (
            isinstance(live, list)
            and len(want) == len(live)
            and all(is_subset(w, x) for w, x in zip(want, live, strict=True))
        )
    return want == live


def _with_hash(obj: dict[str, Any]) -> dict[str, Any]:
    meta = dict(obj["metadata"])
    meta["annotations"] = {**meta.get("annotations", {}), ANNOTATION_SPEC_HASH: spec_hash(obj)}
    return {**obj, "metadata": meta}


def is_current(desired: dict[str, Any], live: dict[str, Any] | None) -> bool:
    """Live object already has the desired content and hash: applying would change nothing."""
    if live is None:
        return False
    want = _with_hash(desired)
    body = {k: v for k, v in want.items() if k not in ("apiVersion", "kind")}
    return is_subset(body, live)


def kube_api_client() -> client.ApiClient:
    """Client from CONTROLLER_KUBECONFIG, KUBECONFIG, in-cluster config, else the devcluster."""
    from django.conf import settings

    path = settings.CONTROLLER_KUBECONFIG or os.environ.get("KUBECONFIG", "")
    if not path and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()
        return client.ApiClient()
    if not path:
        path = str(Path(settings.BASE_DIR) / ".state" / "cluster" / "kubeconfig")
    return config.new_client_from_config(config_file=path.split(os.pathsep)[0])


_CLIENTS: dict[int, client.ApiClient] = {}


def shared_api_client() -> client.ApiClient:
    """One client per process (Celery forks workers: a pool must not cross a fork)."""
    pid = os.getpid()
    if pid not in _CLIENTS:
        _CLIENTS[pid] = kube_api_client()
    return _CLIENTS[pid]


def http(
    api: client.ApiClient,
    method: str,
    path: str,
    query: Any = (),
    *,
    headers: dict[str, str] | None = None,
    body: Any = None,
    timeout: Any = TIMEOUT,
) -> Any:
    """One raw request through the client's auth and TLS; raises ApiException on >= 400.

    Returns the client's RESTResponse (`.read()` for the body, `.response` to stream)."""
    method, url, hdrs, body, _ = api.param_serialize(
        method,
        path,
        query_params=list(query),
        header_params=headers or {},
        body=body,
        auth_settings=["BearerToken"],
    )
    resp = api.call_api(method, url, header_params=hdrs, body=body, _request_timeout=timeout)
    if resp.status >= 400:
        exc = ApiException(status=resp.status, reason=resp.reason)
        exc.body = resp.read().decode(errors="replace")
        raise exc
    return resp


def _path(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    """The object's (or collection's) path; a namespaced kind without namespace: all of them."""
    prefix, plural, namespaced = KINDS[(api_version, kind)]
    path = prefix + (f"/namespaces/{namespace}" if namespaced and namespace else "") + f"/{plural}"
    return path + (f"/{name}" if name else "")


@dataclass
class Applier:
    """Reads, applies and prunes managed objects, counting each call by verb."""

    api: client.ApiClient
    field_manager: str = FIELD_MANAGER
    calls: Counter[str] = field(default_factory=Counter)
    lists: Counter[str] = field(default_factory=Counter)  # resource plural -> LISTs
    # Wall time with at least one API request in flight (a reconcile's parallel reads count
    # once, as the time they took together), for the reconcile's log line and the benchmark.
    api_seconds: float = 0.0
    _in_flight: int = 0
    _busy_since: float = 0.0

    @property
    def writes(self) -> int:
        return sum(n for verb, n in self.calls.items() if verb in ("apply", "delete"))

    def _call(self, verb: str, method: str, path: str, **kw: Any) -> dict[str, Any] | None:
        with _COUNT_LOCK:  # a reconcile reads a project's kinds from several threads at once
            self.calls[verb] += 1
            CALLS[verb] += 1
            if verb == "list":
                resource = path.rsplit("/", 1)[-1]
                self.lists[resource] += 1
                LISTS[resource] += 1
        headers = {"Accept": "application/json"}
        if "content_type" in kw:
            headers["Content-Type"] = kw.pop("content_type")
        with _COUNT_LOCK:
            if self._in_flight == 0:
                self._busy_since = time.perf_counter()
            self._in_flight += 1
        try:
            resp = http(
                self.api, method, path, kw.get("query", ()), headers=headers, body=kw.get("body")
            )
            body = resp.read()
        except ApiException as exc:
            if exc.status == 404 and method in ("GET", "DELETE"):
                return None
            raise _classify(exc) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TransientApiError(f"{method} {path}: {exc}") from exc
        finally:
            with _COUNT_LOCK:
                self._in_flight -= 1
                if self._in_flight == 0:
                    self.api_seconds += time.perf_counter() - self._busy_since
        return json.loads(body or b"null")

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None):
        """The live object or None."""
        return self._call("get", "GET", _path(api_version, kind, namespace, name))

    def list_managed(
        self, api_version: str, kind: str, namespace: str | None = None, selector: str = ""
    ) -> dict[str, dict[str, Any]]:
        """Live objects of a kind carrying the managed-by label (plus `selector`), by name."""
        sel = MANAGED_SELECTOR + (f",{selector}" if selector else "")
        return {
            o["metadata"]["name"]: o
            for o in self.list_path(_path(api_version, kind, namespace), sel)
        }

    def list_managed_everywhere(
        self, api_version: str, kind: str
    ) -> dict[str, dict[str, dict[str, Any]]]:
        """Live managed objects of a namespaced kind in ALL namespaces, in one LIST: namespace ->
        name -> object (the resync reads each kind once, not once per project)."""
        by_namespace: dict[str, dict[str, dict[str, Any]]] = {}
        for obj in self.list_path(_path(api_version, kind, None), MANAGED_SELECTOR):
            meta = obj["metadata"]
            by_namespace.setdefault(meta.get("namespace", ""), {})[meta["name"]] = obj
        return by_namespace

    def list_path(
        self, path: str, selector: str = "", field_selector: str = ""
    ) -> list[dict[str, Any]]:
        """The items of one LIST request on a collection path (e.g. every ResourceClaim)."""
        query = [("labelSelector", selector)] if selector else []
        query += [("fieldSelector", field_selector)] if field_selector else []
        body = self._call("list", "GET", path, query=query)
        return (body or {}).get("items", [])

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply with our field manager, taking over conflicting fields."""
        meta = obj["metadata"]
        path = _path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        query = [("fieldManager", self.field_manager), ("force", "true")]
        body = json.dumps(_with_hash(obj))

        def patch() -> dict[str, Any]:
            applied = self._call(
                "apply", "PATCH", path, query=query, body=body,
                content_type="application/apply-patch+yaml",
            )  # fmt: skip
            return applied or {}  # None only answers a GET's or DELETE's 404

        try:
            return patch()
        except ApplyError as exc:
            marker = RECREATE_ON.get(obj["kind"])
            if marker and marker in exc.message:
                self._call("delete", "DELETE", path)
                return patch()
            raise

    def _remove_foreign(
        self, obj: dict[str, Any], live: dict[tuple[str, str], dict[str, dict[str, Any]]]
    ) -> bool:
        """Never adopt: a namespaced object we are about to create, that the namespace already
        holds without our label, was made by someone else (a member pre-creating a colleague's
        next account name, to hold its identity once we bind it). Server-side apply would take
        it over, uid and tokens included; it is deleted (that uid only) and made afresh.

        Costs one GET per object created in an existing namespace, none in a new namespace
        (`live` then holds no kind of it: nothing can be there yet) and none on a no-op sync."""
        meta = obj["metadata"]
        key = (obj["apiVersion"], obj["kind"])
        if not meta.get("namespace") or key not in live or meta["name"] in live[key]:
            return False
        found = self.get(*key, meta["name"], meta["namespace"])
        if found is None:
            return False
        uid = found["metadata"]["uid"]
        log.warning(
            "%s %s/%s exists but was not made by Tranche (uid %s): deleting it, not adopting it",
            obj["kind"], meta["namespace"], meta["name"], uid,
        )  # fmt: skip
        path = _path(*key, meta["namespace"], meta["name"])
        self._call("delete", "DELETE", path, body={"preconditions": {"uid": uid}})
        return True

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        """Delete (background propagation); a missing object is not an error."""
        self._call("delete", "DELETE", _path(api_version, kind, namespace, name))

    def sync(
        self,
        desired: list[dict[str, Any]],
        live: dict[tuple[str, str], dict[str, dict[str, Any]]],
        prune: bool = True,
    ) -> list[str]:
        """Apply what differs from `live` (by kind, then name), prune the rest; return changes."""
        changes: list[str] = []
        to_apply, to_delete = plan(desired, live, prune)
        for obj in to_apply:
            if self._remove_foreign(obj, live):
                changes.append(f"replaced foreign {obj['kind']}/{obj['metadata']['name']}")
            self.apply(obj)
            changes.append(f"applied {obj['kind']}/{obj['metadata']['name']}")
        for api_version, kind, name, ns in to_delete:
            self.delete(api_version, kind, name, ns)
            changes.append(f"deleted {kind}/{name}")
        return changes


def plan(
    desired: list[dict[str, Any]],
    live: dict[tuple[str, str], dict[str, dict[str, Any]]],
    prune: bool = True,
) -> tuple[list[dict[str, Any]], list[tuple[str, str, str, str | None]]]:
    """What `Applier.sync` would do (pure): the desired objects to apply, in order, and the live
    ones to delete as (apiVersion, kind, name, namespace). Both empty: the cluster matches."""
    wanted: dict[tuple[str, str], set[str]] = {k: set() for k in live}
    to_apply = []
    for obj in desired:
        key = (obj["apiVersion"], obj["kind"])
        name = obj["metadata"]["name"]
        wanted.setdefault(key, set()).add(name)
        if not is_current(obj, live.get(key, {}).get(name)):
            to_apply.append(obj)
    to_delete = []
    if prune:
        for (api_version, kind), objs in live.items():
            for name, obj in objs.items():
                if name not in wanted[(api_version, kind)]:
                    ns = obj["metadata"].get("namespace")
                    to_delete.append((api_version, kind, name, ns))
    return to_apply, to_delete


def _classify(exc: ApiException) -> Exception:
    try:
        status = json.loads(exc.body or "{}")
    except ValueError:
        status = {}
    message = status.get("message") or exc.reason or str(exc)
    reason = status.get("reason") or str(exc.status)
    terminating = "being terminated" in message
    if exc.status in TRANSIENT_STATUS or terminating:
        return TransientApiError(f"{exc.status} {reason}: {message}")
    return ApplyError(reason, message)
